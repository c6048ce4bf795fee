//! The wall clock edged reads (back-offs, container times, status times), injected so the pod
//! workers can be tested under tokio's paused time: [`Clock::following_tokio`] moves with
//! `tokio::time`, which a paused runtime advances only when every task waits.

use std::sync::Arc;
use std::time::SystemTime;

/// A source of the current wall-clock time. Cheap to clone.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> SystemTime + Send + Sync>);

// === impl Clock ===

impl Clock {
    /// The system's clock.
    pub fn system() -> Clock {
        Clock(Arc::new(SystemTime::now))
    }

    #[cfg(test)]
    /// A clock that starts at the system's time now and advances with `tokio::time` (so under
    /// a paused runtime it moves only as the runtime's time does).
    pub fn following_tokio() -> Clock {
        let (start, base) = (SystemTime::now(), tokio::time::Instant::now());
        Clock(Arc::new(move || start + base.elapsed()))
    }

    /// The current time.
    pub fn now(&self) -> SystemTime {
        (self.0)()
    }

    #[cfg(test)]
    /// The clock as a plain function, for parts that take one (a fake runtime).
    pub fn as_fn(&self) -> Arc<dyn Fn() -> SystemTime + Send + Sync> {
        self.0.clone()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Clock").field(&self.now()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_clock_following_tokio_moves_with_paused_time() {
        let clock = Clock::following_tokio();
        let before = clock.now();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let moved = clock.now().duration_since(before).unwrap();
        assert!(moved >= Duration::from_secs(3600), "{moved:?}");
        assert!(moved < Duration::from_secs(3601), "{moved:?}");
    }
}
