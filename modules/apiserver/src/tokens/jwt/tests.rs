use super::*;

const NOW: i64 = 1_700_000_000;

fn signer() -> Signer {
    Signer::from_pem(&Signer::generate_pem().unwrap()).unwrap()
}

fn claims() -> Claims {
    Claims {
        iss: ISSUER.into(),
        sub: "system:serviceaccount:default:builder".into(),
        aud: vec![ISSUER.into()],
        exp: NOW + 3600,
        iat: NOW,
        nbf: NOW,
        kubernetes: Private {
            namespace: "default".into(),
            serviceaccount: Ref {
                name: "builder".into(),
                uid: "sa-uid".into(),
            },
            pod: Some(Ref {
                name: "web".into(),
                uid: "pod-uid".into(),
            }),
            secret: None,
        },
    }
}

fn payload(token: &str) -> serde_json::Value {
    let part = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

#[test]
fn a_signed_token_verifies_to_its_claims() {
    let signer = signer();
    let token = signer.sign(&claims()).unwrap();
    assert!(!token.contains('='), "base64url without padding");
    assert_eq!(signer.verify(&token, NOW + 10), Ok(claims()));
    let header = token.split('.').next().unwrap();
    let header: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["kid"], signer.kid.as_str());
}

#[test]
fn the_claims_are_named_as_kubernetes_names_them() {
    let token = signer().sign(&claims()).unwrap();
    let payload = payload(&token);
    assert_eq!(payload["iss"], ISSUER);
    assert_eq!(payload["sub"], "system:serviceaccount:default:builder");
    assert_eq!(payload["aud"], serde_json::json!([ISSUER]));
    assert_eq!(payload["exp"], NOW + 3600);
    let k = &payload["kubernetes.io"];
    assert_eq!(k["namespace"], "default");
    assert_eq!(k["serviceaccount"]["uid"], "sa-uid");
    assert_eq!(k["pod"]["name"], "web");
    assert!(k.get("secret").is_none());
}

#[test]
fn a_tampered_token_is_refused() {
    let signer = signer();
    let token = signer.sign(&claims()).unwrap();
    let mut forged = claims();
    forged.kubernetes.namespace = "kube-system".into();
    forged.sub = "system:serviceaccount:kube-system:builder".into();
    let parts: Vec<&str> = token.split('.').collect();
    let swapped = format!("{}.{}.{}", parts[0], encode_json(&forged), parts[2]);
    assert_eq!(signer.verify(&swapped, NOW), Err(TokenError::Signature));
    let mut sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    sig[10] ^= 1;
    let flipped = format!("{}.{}.{}", parts[0], parts[1], URL_SAFE_NO_PAD.encode(sig));
    assert_eq!(signer.verify(&flipped, NOW), Err(TokenError::Signature));
    // Another key's token does not verify either.
    let other = super::Signer::from_pem(&Signer::generate_pem().unwrap()).unwrap();
    assert_eq!(
        other.verify(&token, NOW),
        Err(TokenError::Signature),
        "a token from another key"
    );
}

#[test]
fn an_unsigned_or_malformed_token_is_refused() {
    let signer = signer();
    let token = signer.sign(&claims()).unwrap();
    let parts: Vec<&str> = token.split('.').collect();
    let none = encode_json(&serde_json::json!({"alg": "none"}));
    assert_eq!(
        signer.verify(&format!("{none}.{}.", parts[1]), NOW),
        Err(TokenError::Algorithm("none".into()))
    );
    for bad in ["", "a.b", "a.b.c.d", "!!.!!.!!", &format!("{token}=")] {
        assert!(signer.verify(bad, NOW).is_err(), "{bad}");
    }
}

#[test]
fn an_expired_token_is_refused_after_the_leeway() {
    let signer = signer();
    let token = signer.sign(&claims()).unwrap();
    let exp = NOW + 3600;
    assert!(signer.verify(&token, exp + LEEWAY_SECONDS).is_ok());
    assert_eq!(
        signer.verify(&token, exp + LEEWAY_SECONDS + 1),
        Err(TokenError::Expired)
    );
    assert_eq!(
        signer.verify(&token, NOW - LEEWAY_SECONDS - 1),
        Err(TokenError::NotYetValid)
    );
}

#[test]
fn a_token_for_another_audience_or_issuer_does_not_authenticate_to_the_api() {
    let signer = signer();
    let mut vault = claims();
    vault.aud = vec!["vault".into()];
    let token = signer.sign(&vault).unwrap();
    assert_eq!(
        signer.verify(&token, NOW),
        Err(TokenError::Audience(vec!["vault".into()]))
    );
    let mut elsewhere = claims();
    elsewhere.iss = "https://example.com".into();
    let token = signer.sign(&elsewhere).unwrap();
    assert!(matches!(
        signer.verify(&token, NOW),
        Err(TokenError::Issuer(_))
    ));
}

#[test]
fn a_key_that_is_not_pkcs8_p256_is_refused() {
    assert!(Signer::from_pem("").is_err());
    let garbage = pem("PRIVATE KEY", b"not a key");
    assert!(matches!(
        Signer::from_pem(&garbage),
        Err(TokenError::Key(_))
    ));
}
