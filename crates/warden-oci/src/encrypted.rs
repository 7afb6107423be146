//! cosign's encrypted private keys (`cosign generate-key-pair`): the PEM's contents are JSON
//! (the format of go-securesystemslib's `encrypted` package) naming an scrypt derivation of a
//! 32-byte key from the password, and NaCl's secretbox (XSalsa20-Poly1305) sealing the PKCS#8
//! key with it. Only opened, never written: `warden keygen` writes plain PKCS#8.

use crate::error::OciError;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::{Nonce, XSalsa20Poly1305};
use serde::Deserialize;

/// The most memory an scrypt derivation may ask for (128 · N · r bytes): cosign's own
/// parameters (N = 32768, r = 8) take 32 MiB; a key file asking for more is refused rather
/// than obeyed.
const SCRYPT_MEMORY: u64 = 256 << 20;

#[derive(Deserialize)]
struct Sealed {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Deserialize)]
struct Kdf {
    name: String,
    params: KdfParams,
    salt: String,
}

#[derive(Deserialize)]
struct KdfParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Deserialize)]
struct Cipher {
    name: String,
    nonce: String,
}

/// The PKCS#8 DER that `contents` (an encrypted key's PEM contents) seals with `password`.
pub(crate) fn open(contents: &[u8], password: &[u8]) -> Result<Vec<u8>, OciError> {
    let bad = |why: &str| OciError::Key(format!("the encrypted signing key {why}"));
    let sealed: Sealed = serde_json::from_slice(contents)
        .map_err(|e| bad(&format!("is not cosign's format ({e})")))?;
    if sealed.kdf.name != "scrypt" || sealed.cipher.name != "nacl/secretbox" {
        return Err(bad(&format!(
            "uses {} and {}, not scrypt and nacl/secretbox",
            sealed.kdf.name, sealed.cipher.name
        )));
    }
    let KdfParams { n, r, p } = sealed.kdf.params;
    if !n.is_power_of_two() || n < 2 || 128 * n * u64::from(r) > SCRYPT_MEMORY {
        return Err(bad(&format!(
            "asks scrypt for N = {n}, r = {r}: N must be a power of two and 128·N·r at most \
             {SCRYPT_MEMORY} bytes"
        )));
    }
    let decode = |what: &str, text: &str| {
        STANDARD
            .decode(text)
            .map_err(|_| bad(&format!("has a {what} that is not base64")))
    };
    let salt = decode("salt", &sealed.kdf.salt)?;
    let nonce = decode("nonce", &sealed.cipher.nonce)?;
    let ciphertext = decode("ciphertext", &sealed.ciphertext)?;
    if nonce.len() != 24 {
        return Err(bad("has a nonce that is not 24 bytes"));
    }
    let params = scrypt::Params::new(n.trailing_zeros() as u8, r, p, 32)
        .map_err(|e| bad(&format!("has scrypt parameters scrypt refuses ({e})")))?;
    let mut key = [0u8; 32];
    scrypt::scrypt(password, &salt, &params, &mut key)
        .map_err(|e| bad(&format!("could not be derived ({e})")))?;
    XSalsa20Poly1305::new(&key.into())
        .decrypt(Nonce::from_slice(&nonce), ciphertext.as_slice())
        .map_err(|_| {
            OciError::Key(
                "the encrypted signing key does not open with COSIGN_PASSWORD: a wrong \
                 password, or a damaged key file"
                    .into(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(n: u64, r: u32, kdf: &str) -> Vec<u8> {
        let salt = STANDARD.encode([0u8; 32]);
        let nonce = STANDARD.encode([0u8; 24]);
        format!(
            r#"{{"kdf":{{"name":"{kdf}","params":{{"N":{n},"r":{r},"p":1}},"salt":"{salt}"}},
                "cipher":{{"name":"nacl/secretbox","nonce":"{nonce}"}},"ciphertext":"AAAA"}}"#
        )
        .into_bytes()
    }

    fn refusal(contents: &[u8]) -> String {
        match open(contents, b"pw") {
            Err(e) => e.to_string(),
            Ok(_) => "opened".into(),
        }
    }

    #[test]
    fn a_key_file_cannot_make_scrypt_take_the_machine() {
        let huge = refusal(&sealed(1 << 30, 8, "scrypt"));
        assert!(huge.contains("N = 1073741824"), "{huge}");
        let odd = refusal(&sealed(1000, 8, "scrypt"));
        assert!(odd.contains("power of two"), "{odd}");
    }

    #[test]
    fn other_formats_and_damage_are_named() {
        let other = refusal(&sealed(32768, 8, "pbkdf2"));
        assert!(other.contains("pbkdf2"), "{other}");
        assert!(refusal(b"not json").contains("not cosign's format"));
        let damaged = refusal(&sealed(1024, 8, "scrypt"));
        assert!(damaged.contains("does not open"), "{damaged}");
    }
}
