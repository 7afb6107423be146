//! Signatures interoperate with sigstore's own Rust code, the `sigstore` crate's cosign
//! module: a signature layer it signs (its payload, its private-key signer) verifies with
//! warden, one warden writes verifies with its public-key verifier, and an encrypted private
//! key it writes (cosign's format) signs through warden.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sigstore::cosign::SignatureLayer;
use sigstore::cosign::constraint::{Constraint, PrivateKeySigner};
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};
use sigstore::crypto::SigningScheme;
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::registry::OciReference;
use warden_oci::layout::Descriptor;
use warden_oci::sign::{SIGNATURE_ANNOTATION, SIMPLE_SIGNING, signature_artifact, verify};
use warden_oci::{Digest, SigningKey, TrustedKey, generate};

const P256: SigningScheme = SigningScheme::ECDSA_P256_SHA256_ASN1;
const REPOSITORY: &str = "127.0.0.1:5000/tools/units";

fn digest() -> Digest {
    Digest::of(b"a manifest")
}

/// A signature layer as warden fetches it: the payload's bytes, the signature in the
/// layer's annotation.
fn fetched(payload: &[u8], signature: &str) -> (Descriptor, Vec<u8>) {
    let mut layer = Descriptor::of(SIMPLE_SIGNING, payload);
    layer
        .annotations
        .insert(SIGNATURE_ANNOTATION.to_owned(), signature.to_owned());
    (layer, payload.to_vec())
}

#[test]
fn a_signature_layer_sigstores_cosign_code_signs_verifies_with_warden() {
    let signer = P256.create_signer().unwrap();
    let public = signer
        .to_sigstore_keypair()
        .unwrap()
        .public_key_to_pem()
        .unwrap();
    let image: OciReference = REPOSITORY.parse().unwrap();
    let mut layer = SignatureLayer::new_unsigned(&image, digest().as_str()).unwrap();
    let signed = PrivateKeySigner::new_with_signer(signer)
        .add_constraint(&mut layer)
        .unwrap();
    assert!(signed);
    let signature = layer.signature.clone().unwrap();
    let trusted = [TrustedKey::from_pem(&public).unwrap()];
    let found = verify(&[fetched(&layer.raw_data, &signature)], &digest(), &trusted);
    assert_eq!(found, Some(&trusted[0]));
    // The same signature says nothing of another manifest, nor with another key.
    let other = Digest::of(b"another manifest");
    let layers = [fetched(&layer.raw_data, &signature)];
    assert_eq!(verify(&layers, &other, &trusted), None);
    let (_, stranger) = generate().unwrap();
    let stranger = [TrustedKey::from_pem(&stranger).unwrap()];
    assert_eq!(verify(&layers, &digest(), &stranger), None);
}

#[test]
fn a_signature_layer_warden_writes_verifies_with_sigstores_cosign_code() {
    let (private, public) = generate().unwrap();
    let key = SigningKey::from_pem(&private, None).unwrap();
    let artifact = signature_artifact(&key, REPOSITORY, &digest()).unwrap();
    let descriptor = &artifact.manifest.layers[0];
    let theirs = SignatureLayer {
        simple_signing: serde_json::from_slice(&artifact.payload).unwrap(),
        oci_digest: descriptor.digest.clone(),
        certificate_signature: None,
        bundle: None,
        signature: descriptor.annotations.get(SIGNATURE_ANNOTATION).cloned(),
        raw_data: artifact.payload.clone(),
    };
    assert!(
        theirs
            .simple_signing
            .satisfies_manifest_digest(digest().as_str())
    );
    let verifier = PublicKeyVerifier::new(public.as_bytes(), &P256).unwrap();
    assert!(verifier.verify(&theirs).unwrap());
    // Changed by one byte, the payload no longer verifies.
    let mut tampered = theirs;
    tampered.raw_data.push(b' ');
    assert!(!verifier.verify(&tampered).unwrap());
}

#[test]
fn an_encrypted_key_sigstore_writes_signs_through_warden() {
    let pair = P256.create_signer().unwrap().to_sigstore_keypair().unwrap();
    let encrypted = pair.private_key_to_encrypted_pem(b"correct horse").unwrap();
    assert!(encrypted.contains("ENCRYPTED SIGSTORE PRIVATE KEY"));
    let key = SigningKey::from_pem(&encrypted, Some(b"correct horse")).unwrap();
    let public = pair.public_key_to_pem().unwrap();
    assert_eq!(key.public(), TrustedKey::from_pem(&public).unwrap());
    let wrong = SigningKey::from_pem(&encrypted, Some(b"wrong horse"));
    assert!(
        wrong
            .err()
            .is_some_and(|e| e.to_string().contains("does not open"))
    );
    // What warden signs with it, sigstore verifies with the key's public half.
    let artifact = signature_artifact(&key, REPOSITORY, &digest()).unwrap();
    let signature = &artifact.manifest.layers[0].annotations[SIGNATURE_ANNOTATION];
    let reread = SigStoreKeyPair::from_encrypted_pem(encrypted.as_bytes(), b"correct horse")
        .unwrap()
        .to_verification_key(&P256)
        .unwrap();
    reread
        .verify_signature(
            sigstore::crypto::Signature::Raw(&STANDARD.decode(signature).unwrap()),
            &artifact.payload,
        )
        .unwrap();
}
