//! RFC 8785 (JCS) canonical JSON, the byte form that is hashed and signed.

use canon_json::CanonicalFormatter;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Serialises `value` as RFC 8785 canonical JSON bytes.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, CanonicalFormatter::new());
    // Serialising a `serde_json::Value` or a plain derive struct into a Vec cannot fail.
    value
        .serialize(&mut ser)
        .expect("canonical JSON serialisation of an in-memory value");
    out
}

/// `sha256:` + lowercase hex of SHA-256 over the canonical JSON of `output`:
/// the receipt's `output_hash`.
pub fn output_hash(output: &serde_json::Value) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(to_vec(output))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_keys_and_strips_whitespace() {
        let v = json!({"b": 1, "a": {"d": [1, 2], "c": "x"}});
        assert_eq!(to_vec(&v), br#"{"a":{"c":"x","d":[1,2]},"b":1}"#);
    }

    #[test]
    fn numbers_follow_ecmascript_form() {
        // RFC 8785 section 3.2.2.3: 1e+30 and 4.5 in ES6 number form.
        let v: serde_json::Value = serde_json::from_str(r#"[1E30, 4.50, 1e-7]"#).unwrap();
        assert_eq!(to_vec(&v), b"[1e+30,4.5,1e-7]");
    }

    #[test]
    fn output_hash_is_sha256_of_canonical_form() {
        // sha256 of the 7 bytes `"hello"` (with quotes).
        assert_eq!(
            output_hash(&json!("hello")),
            "sha256:5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a"
        );
        // Key order does not change the hash.
        assert_eq!(
            output_hash(&json!({"a": 1, "b": 2})),
            output_hash(&serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap())
        );
    }
}
