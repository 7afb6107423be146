//! cosign-compatible key signatures: ECDSA P-256 over SHA-256 of a "simple signing" payload that
//! names a manifest digest, stored as the layer of a manifest tagged `sha256-<hex>.sig` beside
//! it, the signature in the layer's `dev.cosignproject.cosign/signature` annotation.

use crate::error::OciError;
use crate::layout::{Descriptor, Manifest};
use crate::reference::Digest;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The payload's media type.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The config of cosign's signature manifests.
const IMAGE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// A payload's `critical.type`.
const SIGNATURE_TYPE: &str = "cosign container image signature";

/// The DER prefix of a P-256 public key's SubjectPublicKeyInfo (id-ecPublicKey, prime256v1),
/// before its 65-byte uncompressed point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The tag of the signatures of the manifest at `digest`.
pub fn signature_tag(digest: &Digest) -> String {
    format!("sha256-{}.sig", digest.hex())
}

/// A private key that signs.
pub struct SigningKey {
    pair: EcdsaKeyPair,
}

/// A public key whose signatures are trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    /// The uncompressed point.
    point: Vec<u8>,
}

/// A new key pair, as PEM: the private key (PKCS#8) and the public key (SubjectPublicKeyInfo).
pub fn generate() -> Result<(String, String), OciError> {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| OciError::Key("generating a P-256 key failed".into()))?;
    let key = SigningKey::from_pkcs8(pkcs8.as_ref())?;
    let private = pem::encode(&pem::Pem::new("PRIVATE KEY", pkcs8.as_ref().to_vec()));
    Ok((private, key.public().to_pem()))
}

impl SigningKey {
    /// Reads a PEM private key: PKCS#8 (`BEGIN PRIVATE KEY`, as `warden keygen` and
    /// `openssl genpkey` write it), or cosign's encrypted key (`cosign generate-key-pair`),
    /// opened with `password` (cosign's `COSIGN_PASSWORD`).
    pub fn from_pem(text: &str, password: Option<&[u8]>) -> Result<SigningKey, OciError> {
        let pem = pem::parse(text)
            .map_err(|e| OciError::Key(format!("the signing key is not PEM: {e}")))?;
        match pem.tag() {
            "PRIVATE KEY" => SigningKey::from_pkcs8(pem.contents()),
            "ENCRYPTED SIGSTORE PRIVATE KEY" | "ENCRYPTED COSIGN PRIVATE KEY" => {
                let Some(password) = password else {
                    return Err(OciError::Key(
                        "the signing key is cosign's encrypted key: set COSIGN_PASSWORD to its \
                         password, as cosign reads it (empty for a key made without one)"
                            .into(),
                    ));
                };
                let der = crate::encrypted::open(pem.contents(), password)?;
                SigningKey::from_pkcs8(&der)
            }
            "EC PRIVATE KEY" => Err(OciError::Key(
                "the signing key is a SEC1 EC key: convert it to PKCS#8 with \
                 `openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pkcs8.pem`"
                    .into(),
            )),
            other => Err(OciError::Key(format!(
                "the signing key is a PEM `{other}`, not a P-256 private key in PKCS#8"
            ))),
        }
    }

    fn from_pkcs8(der: &[u8]) -> Result<SigningKey, OciError> {
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, der, &SystemRandom::new())
                .map_err(|e| {
                    OciError::Key(format!("the signing key is not an ECDSA P-256 key: {e}"))
                })?;
        Ok(SigningKey { pair })
    }

    /// The public key that verifies this key's signatures.
    pub fn public(&self) -> TrustedKey {
        TrustedKey {
            point: self.pair.public_key().as_ref().to_vec(),
        }
    }

    /// The signature of `payload`, base64 of ASN.1 DER, as cosign stores it.
    pub fn sign(&self, payload: &[u8]) -> Result<String, OciError> {
        let signature = self
            .pair
            .sign(&SystemRandom::new(), payload)
            .map_err(|_| OciError::Key("signing failed".into()))?;
        Ok(STANDARD.encode(signature.as_ref()))
    }
}

impl TrustedKey {
    /// Reads a PEM public key (`BEGIN PUBLIC KEY`: what `cosign generate-key-pair`,
    /// `openssl pkey -pubout` and `warden keygen` write).
    pub fn from_pem(text: &str) -> Result<TrustedKey, OciError> {
        let pem = pem::parse(text)
            .map_err(|e| OciError::Key(format!("the public key is not PEM: {e}")))?;
        let der = pem.contents();
        match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if pem.tag() == "PUBLIC KEY" && point.len() == 65 && point[0] == 4 => {
                Ok(TrustedKey {
                    point: point.to_vec(),
                })
            }
            _ => Err(OciError::Key(format!(
                "the public key is not an ECDSA P-256 public key (a PEM `{}` of {} bytes): \
                 cosign's and warden's keys are",
                pem.tag(),
                der.len()
            ))),
        }
    }

    /// The PEM of this key.
    pub fn to_pem(&self) -> String {
        pem::encode(&pem::Pem::new("PUBLIC KEY", self.spki()))
    }

    fn spki(&self) -> Vec<u8> {
        [&P256_SPKI_PREFIX[..], &self.point].concat()
    }

    /// `sha256:` of the key's DER, as the audit names the signer.
    pub fn fingerprint(&self) -> Digest {
        Digest::of(&self.spki())
    }

    /// Whether `signature` (base64 of ASN.1 DER) signs `payload`.
    pub fn verifies(&self, payload: &[u8], signature: &str) -> bool {
        let Ok(der) = STANDARD.decode(signature.trim()) else {
            return false;
        };
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(payload, &der)
            .is_ok()
    }
}

/// The payload that signs the manifest at `digest` of the repository `name`.
pub fn payload(name: &str, digest: &Digest) -> Vec<u8> {
    let payload = json!({
        "critical": {
            "identity": { "docker-reference": name },
            "image": { "docker-manifest-digest": digest.as_str() },
            "type": SIGNATURE_TYPE,
        },
        "optional": null,
    });
    payload.to_string().into_bytes()
}

/// The digest a verified payload signs.
fn signed_digest(payload: &[u8]) -> Option<String> {
    let payload: Value = serde_json::from_slice(payload).ok()?;
    let critical = payload.get("critical")?;
    if critical.get("type")?.as_str()? != SIGNATURE_TYPE {
        return None;
    }
    Some(
        critical
            .get("image")?
            .get("docker-manifest-digest")?
            .as_str()?
            .to_owned(),
    )
}

/// A signature manifest ready to push: it, its config and its payload layer.
pub struct SignatureArtifact {
    pub manifest: Manifest,
    pub config: Vec<u8>,
    pub payload: Vec<u8>,
}

/// The signature artifact of the manifest at `digest` of repository `name`, signed by `key`.
pub fn signature_artifact(
    key: &SigningKey,
    name: &str,
    digest: &Digest,
) -> Result<SignatureArtifact, OciError> {
    let payload = payload(name, digest);
    let mut layer = Descriptor::of(SIMPLE_SIGNING, &payload);
    layer
        .annotations
        .insert(SIGNATURE_ANNOTATION.to_owned(), key.sign(&payload)?);
    let config = json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": { "type": "layers", "diff_ids": [layer.digest] },
    })
    .to_string()
    .into_bytes();
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(crate::layout::MANIFEST.to_owned()),
        artifact_type: None,
        config: Descriptor::of(IMAGE_CONFIG, &config),
        layers: vec![layer],
        subject: None,
        annotations: BTreeMap::new(),
    };
    Ok(SignatureArtifact {
        manifest,
        config,
        payload,
    })
}

/// Finds, among the `layers` of a signature manifest and their fetched payloads, one signed by
/// a key of `trusted` over `digest`; answers that key.
pub fn verify<'k>(
    signatures: &[(Descriptor, Vec<u8>)],
    digest: &Digest,
    trusted: &'k [TrustedKey],
) -> Option<&'k TrustedKey> {
    signatures.iter().find_map(|(layer, payload)| {
        let signature = layer.annotations.get(SIGNATURE_ANNOTATION)?;
        let key = trusted.iter().find(|k| k.verifies(payload, signature))?;
        (signed_digest(payload)? == digest.as_str()).then_some(key)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_key_only_and_for_its_digest_only() {
        let (private, public) = generate().unwrap();
        let key = SigningKey::from_pem(&private, None).unwrap();
        let trusted = TrustedKey::from_pem(&public).unwrap();
        assert_eq!(key.public(), trusted);
        let digest = Digest::of(b"manifest");
        let artifact = signature_artifact(&key, "r.test/a", &digest).unwrap();
        let layers = vec![(
            artifact.manifest.layers[0].clone(),
            artifact.payload.clone(),
        )];
        assert_eq!(
            verify(&layers, &digest, std::slice::from_ref(&trusted)),
            Some(&trusted)
        );
        assert_eq!(
            verify(
                &layers,
                &Digest::of(b"other"),
                std::slice::from_ref(&trusted)
            ),
            None
        );
        let other = TrustedKey::from_pem(&generate().unwrap().1).unwrap();
        assert_eq!(verify(&layers, &digest, &[other]), None);
        let mut tampered = layers;
        tampered[0].1 = payload("r.test/a", &Digest::of(b"other"));
        assert_eq!(verify(&tampered, &digest, &[trusted]), None);
    }
}
