use std::cell::Cell;
use std::rc::Rc;

use super::*;

/// A connection whose in-flight state the test sets.
#[derive(Clone, Debug, Default)]
struct Fake {
    busy: Rc<Cell<bool>>,
    name: &'static str,
}

impl Evictable for Fake {
    fn busy(&self) -> bool {
        self.busy.get()
    }
}

fn fake(name: &'static str) -> Fake {
    Fake {
        name,
        ..Fake::default()
    }
}

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn pool(max_total: usize, max_unauthenticated: usize, max_per_client: usize) -> Pool<Fake> {
    Pool::new(Limits {
        max_total,
        max_unauthenticated,
        max_per_client,
        max_per_user: max_total,
        reserved: 0,
    })
}

/// Admits and expects no eviction; returns the id.
fn admitted(pool: &mut Pool<Fake>, from: IpAddr, name: &'static str) -> u64 {
    match pool.admit(from, fake(name)) {
        Admission::Admitted { id, evicted: None } => id,
        other => panic!("{name} not admitted cleanly: {other:?}"),
    }
}

/// Admits and returns the name of the connection evicted for it.
fn evicting(pool: &mut Pool<Fake>, from: IpAddr, name: &'static str) -> &'static str {
    match pool.admit(from, fake(name)) {
        Admission::Admitted {
            evicted: Some(e), ..
        } => e.name,
        other => panic!("{name} evicted nothing: {other:?}"),
    }
}

#[test]
fn a_client_over_its_share_pushes_out_its_own_oldest_idle_connection() {
    let mut pool = pool(100, 10, 2);
    admitted(&mut pool, ip(2), "a1");
    admitted(&mut pool, ip(1), "real");
    admitted(&mut pool, ip(2), "a2");
    assert_eq!(evicting(&mut pool, ip(2), "a3"), "a1");
    assert_eq!(evicting(&mut pool, ip(2), "a4"), "a2");
    assert_eq!(pool.unauthenticated(), 3);
}

#[test]
fn a_client_whose_share_is_all_busy_is_refused_at_once() {
    let mut pool = pool(100, 10, 2);
    let busy = fake("a1");
    busy.busy.set(true);
    pool.admit(ip(2), busy.clone());
    let also = fake("a2");
    also.busy.set(true);
    pool.admit(ip(2), also);
    assert!(matches!(
        pool.admit(ip(2), fake("a3")),
        Admission::Refused(Refusal::PerClient)
    ));
    busy.busy.set(false);
    assert_eq!(evicting(&mut pool, ip(2), "a3"), "a1");
}

#[test]
fn a_full_pool_evicts_from_the_client_holding_the_most() {
    let mut pool = pool(100, 4, 3);
    admitted(&mut pool, ip(1), "real");
    admitted(&mut pool, ip(2), "b1");
    admitted(&mut pool, ip(3), "c1");
    admitted(&mut pool, ip(3), "c2");
    // 127.0.0.3 holds the most; its oldest goes, though `real` is older.
    assert_eq!(evicting(&mut pool, ip(4), "d1"), "c1");
    // Now every address holds one: the oldest of all goes.
    assert_eq!(evicting(&mut pool, ip(4), "d2"), "real");
}

#[test]
fn busy_connections_are_never_evicted_and_a_full_pool_of_them_refuses() {
    let mut pool = pool(100, 2, 2);
    for name in ["x", "y"] {
        let f = fake(name);
        f.busy.set(true);
        pool.admit(ip(2), f);
    }
    assert!(matches!(
        pool.admit(ip(3), fake("z")),
        Admission::Refused(Refusal::Full)
    ));
}

#[test]
fn authenticated_connections_keep_their_reserved_room_and_are_never_evicted() {
    let mut pool = pool(4, 2, 2);
    let a = admitted(&mut pool, ip(1), "admin1");
    let b = admitted(&mut pool, ip(1), "admin2");
    assert!(pool.promote(a) && pool.promote(b));
    admitted(&mut pool, ip(2), "x1");
    admitted(&mut pool, ip(3), "y1");
    // The unauthenticated pool is full: a newcomer evicts an unauthenticated one, not an admin.
    assert_eq!(evicting(&mut pool, ip(4), "z1"), "x1");
    assert_eq!((pool.authenticated(), pool.unauthenticated()), (2, 2));
    // Promotion always fits: it moves a connection, the total is unchanged.
    let c = match pool.admit(ip(5), fake("admin3")) {
        Admission::Admitted { id, .. } => id,
        other => panic!("{other:?}"),
    };
    assert!(pool.promote(c));
    assert_eq!((pool.authenticated(), pool.unauthenticated()), (3, 1));
}

#[test]
fn an_evicted_connection_cannot_be_promoted_and_its_release_changes_nothing() {
    let mut pool = pool(10, 1, 1);
    let old = admitted(&mut pool, ip(2), "old");
    let admin = match pool.admit(ip(1), fake("admin")) {
        Admission::Admitted {
            id,
            evicted: Some(e),
        } if e.name == "old" => id,
        other => panic!("{other:?}"),
    };
    assert!(!pool.promote(old));
    pool.release(old);
    assert!(pool.promote(admin));
    assert_eq!((pool.authenticated(), pool.unauthenticated()), (1, 0));
    pool.release(admin);
    assert_eq!((pool.authenticated(), pool.unauthenticated()), (0, 0));
}

#[test]
fn limits_are_made_consistent() {
    let limits = Limits {
        max_total: 0,
        max_unauthenticated: 50,
        max_per_client: 0,
        max_per_user: 0,
        reserved: 10,
    }
    .sane();
    assert_eq!(
        (
            limits.max_total,
            limits.max_unauthenticated,
            limits.max_per_client
        ),
        (1, 1, 1)
    );
}

#[test]
fn one_user_holds_its_share_of_connections_and_the_reserve_stays_for_the_privileged() {
    let mut pool = Pool::new(Limits {
        max_total: 10,
        max_unauthenticated: 2,
        max_per_client: 2,
        max_per_user: 3,
        reserved: 3,
    });
    let open = |pool: &mut Pool<Fake>| {
        let id = admitted(pool, ip(2), "c");
        pool.promote(id);
        id
    };
    // One user: three connections, the fourth is refused.
    let mine: Vec<u64> = (0..3).map(|_| open(&mut pool)).collect();
    for &id in &mine {
        assert_eq!(pool.identify(id, "sa", false), Ok(()));
        assert_eq!(pool.identify(id, "sa", false), Ok(()), "counted once");
    }
    let fourth = open(&mut pool);
    assert_eq!(pool.identify(fourth, "sa", false), Err(Refusal::PerUser));
    pool.release(fourth);
    // Many users: 10 - 2 - 3 = 5 unprivileged connections in all.
    let more: Vec<u64> = (0..2).map(|_| open(&mut pool)).collect();
    assert_eq!(pool.identify(more[0], "sa-2", false), Ok(()));
    assert_eq!(pool.identify(more[1], "sa-3", false), Ok(()));
    let sixth = open(&mut pool);
    assert_eq!(
        pool.identify(sixth, "sa-4", false),
        Err(Refusal::Unreserved)
    );
    pool.release(sixth);
    // The admin and the nodes still get in.
    for who in ["admin", "system:node:n1", "system:node:n2"] {
        let id = admitted(&mut pool, ip(1), "privileged");
        assert_eq!(pool.identify(id, who, true), Ok(()));
    }
    // A connection closed gives its user's room back.
    pool.release(mine[0]);
    let again = open(&mut pool);
    assert_eq!(pool.identify(again, "sa", false), Ok(()));
}
