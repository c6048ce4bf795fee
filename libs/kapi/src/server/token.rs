//! Continue tokens: opaque to clients, `(list revision, last key)` to us.

use apimachinery::ApiError;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

/// Where the next page of a list starts, and the revision every page reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ContinueToken {
    /// The resourceVersion of the first page.
    pub(crate) rv: u64,
    /// The namespace of the last item handed out.
    pub(crate) ns: String,
    /// The name of the last item handed out.
    pub(crate) name: String,
}

impl ContinueToken {
    pub(crate) fn encode(&self) -> String {
        // Serializing a struct of plain strings and a number cannot fail.
        let json = serde_json::to_vec(self).expect("continue token serializes");
        URL_SAFE_NO_PAD.encode(json)
    }

    /// 400 `continue key is not valid` for anything we did not hand out.
    pub(crate) fn decode(token: &str) -> Result<ContinueToken, ApiError> {
        let invalid =
            |why: String| ApiError::bad_request(format!("continue key is not valid: {why}"));
        let bytes = URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|e| invalid(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        let t = ContinueToken {
            rv: 42,
            ns: "kube-system".into(),
            name: "a/b".into(),
        };
        assert_eq!(ContinueToken::decode(&t.encode()).unwrap(), t);
    }

    #[test]
    fn garbage_tokens_are_bad_requests() {
        for bad in ["!!", "e30", "bm90IGpzb24"] {
            assert_eq!(ContinueToken::decode(bad).unwrap_err().code, 400, "{bad}");
        }
    }
}
