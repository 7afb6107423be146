//! Tools that travel: a wasm component pushed to an OCI registry as a Wasm artifact, the
//! policy's suggested grants and limits beside it, both signed with cosign-compatible key
//! signatures; pulled by digest once the tag's digest is verified against trusted keys, every
//! blob checked against its digest, size limit and media type before anything is kept.

#![forbid(unsafe_code)]

mod auth;
mod bounds;
mod encrypted;
mod error;
mod exchange;
pub mod layout;
mod reference;
mod registry;
pub mod sign;
mod trust;

pub use auth::{CredentialSource, Credentials};
pub use bounds::{Bound, Bounds};
pub use error::OciError;
pub use reference::{Digest, Reference, SCHEME, Target};
pub use registry::{Reach, Registry};
pub use sign::{SigningKey, TrustedKey, generate};
pub use trust::TrustFile;

use layout::{
    CREATED, ComponentArtifact, Descriptor, EMPTY, MANIFEST_LIMIT, Manifest, POLICY_ARTIFACT,
    POLICY_LAYER, POLICY_LIMIT, PolicyArtifact, TITLE, WIT_FILES, WIT_LAYER, WIT_LIMIT, WasmConfig,
    WitFile, component_layer,
};

/// The most warden reads of a signature's payload.
const PAYLOAD_LIMIT: u64 = 64 << 10;

/// The tag under which a component's policy suggestion is found (registries without the
/// referrers API have only tags to look by).
pub fn policy_tag(component: &Digest) -> String {
    format!("sha256-{}.policy", component.hex())
}

/// What `push` published.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The component's manifest.
    pub component: Digest,
    /// The suggestion's manifest, when there was one.
    pub policy: Option<Digest>,
    /// Whether both were signed.
    pub signed: bool,
}

/// Publishes `component` (a component's bytes) at `reference`'s tag, made at `created` (RFC
/// 3339, recorded in its manifest so that a consumer can tell an older version), with
/// `suggestion` (the policy's grants and limits as TOML) and the tool's WIT `docs` beside it,
/// each signed by `key` when given.
pub async fn push(
    reference: &Reference,
    component: Vec<u8>,
    created: &str,
    suggestion: Option<String>,
    docs: &[WitFile],
    key: Option<&SigningKey>,
    reach: &Reach,
) -> Result<Pushed, OciError> {
    let Target::Tag(tag) = &reference.target else {
        return Err(OciError::BadReference(format!(
            "`{reference}`: push to a tag (oci://REGISTRY/REPOSITORY:TAG), not a digest"
        )));
    };
    let registry = Registry::connect(reference, reach).await?;
    let artifact = ComponentArtifact::new(component, created)?;
    registry.push_blob(&artifact.config).await?;
    registry.push_blob(&artifact.component).await?;
    let digest = registry
        .push_manifest(&artifact.manifest, Some(tag))
        .await?;
    let name = reference.name();
    if let Some(key) = key {
        sign_manifest(&registry, key, &name, &digest).await?;
    }
    let policy = match suggestion {
        Some(text) => {
            let subject = Descriptor::of(layout::MANIFEST, &artifact.manifest.to_bytes());
            let policy = PolicyArtifact::new(text, docs, subject);
            registry.push_blob(EMPTY).await?;
            registry.push_blob(&policy.suggestion).await?;
            for doc in docs {
                registry.push_blob(&doc.text).await?;
            }
            let at = policy_tag(&digest);
            let policy_digest = registry.push_manifest(&policy.manifest, Some(&at)).await?;
            if let Some(key) = key {
                sign_manifest(&registry, key, &name, &policy_digest).await?;
            }
            Some(policy_digest)
        }
        None => None,
    };
    Ok(Pushed {
        component: digest,
        policy,
        signed: key.is_some(),
    })
}

async fn sign_manifest(
    registry: &Registry,
    key: &SigningKey,
    name: &str,
    digest: &Digest,
) -> Result<(), OciError> {
    let signature = sign::signature_artifact(key, name, digest)?;
    registry.push_blob(&signature.config).await?;
    registry.push_blob(&signature.payload).await?;
    registry
        .push_manifest(&signature.manifest, Some(&sign::signature_tag(digest)))
        .await?;
    Ok(())
}

/// How `pull` treats signatures.
#[derive(Debug, Clone)]
pub enum Trust {
    /// The manifest must be signed by one of these keys.
    Keys(Vec<TrustedKey>),
    /// Signatures are checked against these keys when there are any, and an artifact no key
    /// signed is taken all the same (`--allow-unsigned`).
    Unsigned(Vec<TrustedKey>),
}

/// What `pull` fetched and checked.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The component's manifest digest, the tag resolved once.
    pub digest: Digest,
    /// The component's bytes (their sha256 is the layer's digest).
    pub component: Vec<u8>,
    /// The key that signed the manifest; `None` when taken unsigned.
    pub signer: Option<TrustedKey>,
    /// When the publisher made it: its manifest's `org.opencontainers.image.created`, else its
    /// config's `created` (both covered by the manifest's digest, so by its signature).
    pub created: Option<String>,
    /// The publisher's suggested grants and limits, when there is one signed as the component
    /// is (or the component was taken unsigned).
    pub suggestion: Option<Suggestion>,
    /// The tool's WIT docs that travelled with the suggestion (none without one).
    pub docs: Vec<WitFile>,
    /// It came over plain HTTP from a registry not dialled on loopback
    /// (`--insecure-registry`).
    pub plain_http: bool,
}

/// A publisher's suggested grants and limits.
#[derive(Debug, Clone)]
pub struct Suggestion {
    /// The digest of the manifest that carries it: what an operator accepts it by.
    pub digest: Digest,
    /// The policy's `[grants]` and `[limits]`, as TOML.
    pub text: String,
}

/// Resolves `reference` to a digest once, verifies its signature by `trust`, then fetches the
/// component by digest, checking every blob.
pub async fn pull(reference: &Reference, trust: &Trust, reach: &Reach) -> Result<Pulled, OciError> {
    let registry = Registry::connect(reference, reach).await?;
    let (digest, bytes) = registry.manifest(&reference.target).await?;
    let at = reference.at(&digest);
    let manifest = Manifest::parse(&bytes, &format!("the manifest of {reference}"))?;
    let layer = component_layer(&manifest, &reference.to_string())?;
    let signer = signer(&registry, &digest, trust, reference).await?;
    let config = registry
        .blob(
            &manifest.config,
            MANIFEST_LIMIT,
            &format!("the config of {at}"),
        )
        .await?;
    let config: WasmConfig = serde_json::from_slice(&config)
        .map_err(|e| OciError::Layout(format!("the config of {at} is not a Wasm config: {e}")))?;
    if !config.layer_digests.contains(&layer.digest) {
        return Err(OciError::Layout(format!(
            "the config of {at} does not name its layer {}",
            layer.digest
        )));
    }
    let component = registry
        .blob(
            &layer,
            layout::COMPONENT_LIMIT,
            &format!("the component of {at}"),
        )
        .await?;
    layout::world_of(&component)?;
    let (suggestion, docs) =
        match suggestion(&registry, &digest, trust, signer.is_some(), reference).await? {
            Some((text, docs)) => (Some(text), docs),
            None => (None, Vec::new()),
        };
    let created = manifest
        .annotations
        .get(CREATED)
        .cloned()
        .or(config.created);
    Ok(Pulled {
        digest,
        component,
        signer,
        created,
        suggestion,
        docs,
        plain_http: registry.plain_http(),
    })
}

/// The trusted key that signed the manifest at `digest`; `None` when `trust` takes it unsigned.
async fn signer(
    registry: &Registry,
    digest: &Digest,
    trust: &Trust,
    reference: &Reference,
) -> Result<Option<TrustedKey>, OciError> {
    let keys = match trust {
        Trust::Keys(keys) | Trust::Unsigned(keys) => keys,
    };
    let signatures = signatures(registry, digest).await?;
    if let Some(key) = sign::verify(&signatures, digest, keys) {
        return Ok(Some(key.clone()));
    }
    match trust {
        Trust::Unsigned(_) => Ok(None),
        Trust::Keys(keys) if keys.is_empty() => Err(OciError::Unsigned(format!(
            "no key is trusted for {reference}: pass --key PUBLIC.pem (the publisher's public \
             key) or name one for it in trust.toml in warden's home, or pass --allow-unsigned \
             to take it without a signature"
        ))),
        Trust::Keys(keys) if signatures.is_empty() => Err(OciError::Unsigned(format!(
            "{reference} ({digest}) is not signed: ask its publisher to sign it \
             (`warden push --sign`, `cosign sign --key`), or pass --allow-unsigned; trusted: {}",
            fingerprints(keys)
        ))),
        Trust::Keys(keys) => Err(OciError::BadSignature(format!(
            "{reference} ({digest}) has {} signature(s), none by a trusted key ({}): check \
             --key, or the tag was moved to a manifest its publisher did not sign",
            signatures.len(),
            fingerprints(keys)
        ))),
    }
}

fn fingerprints(keys: &[TrustedKey]) -> String {
    keys.iter()
        .map(|k| k.fingerprint().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The signature layers beside the manifest at `digest`, with their payloads.
async fn signatures(
    registry: &Registry,
    digest: &Digest,
) -> Result<Vec<(Descriptor, Vec<u8>)>, OciError> {
    let tag = Target::Tag(sign::signature_tag(digest));
    let bytes = match registry.manifest(&tag).await {
        Ok((_, bytes)) => bytes,
        Err(OciError::NotFound { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let manifest = Manifest::parse(&bytes, "a signature manifest")?;
    let mut signatures = Vec::new();
    for layer in manifest.layers {
        if layer.media_type != sign::SIMPLE_SIGNING || layer.size > PAYLOAD_LIMIT {
            continue;
        }
        let payload = registry
            .blob(&layer, PAYLOAD_LIMIT, "a signature's payload")
            .await?;
        signatures.push((layer, payload));
    }
    Ok(signatures)
}

/// The policy suggestion published beside the component at `digest`, with the WIT docs that
/// travel in it, when it is signed as the component is.
async fn suggestion(
    registry: &Registry,
    digest: &Digest,
    trust: &Trust,
    component_signed: bool,
    reference: &Reference,
) -> Result<Option<(Suggestion, Vec<WitFile>)>, OciError> {
    let tag = Target::Tag(policy_tag(digest));
    let (policy_digest, bytes) = match registry.manifest(&tag).await {
        Ok(found) => found,
        Err(OciError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let manifest = Manifest::parse(&bytes, "the policy suggestion's manifest")?;
    let about = manifest.subject.as_ref().map(|s| s.digest.as_str());
    if manifest.artifact_type.as_deref() != Some(POLICY_ARTIFACT) || about != Some(digest.as_str())
    {
        return Ok(None);
    }
    if component_signed {
        let keys = match trust {
            Trust::Keys(keys) | Trust::Unsigned(keys) => keys,
        };
        let signatures = signatures(registry, &policy_digest).await?;
        if sign::verify(&signatures, &policy_digest, keys).is_none() {
            tracing::warn!(
                "{reference}: its policy suggestion is not signed as the component is; ignored"
            );
            return Ok(None);
        }
    }
    let Some(layer) = manifest
        .layers
        .iter()
        .find(|l| l.media_type == POLICY_LAYER)
    else {
        return Ok(None);
    };
    let text = registry
        .blob(layer, POLICY_LIMIT, "the policy suggestion")
        .await?;
    let text = String::from_utf8(text)
        .map_err(|_| OciError::Layout("the policy suggestion is not UTF-8 text".into()))?;
    let docs = docs(registry, &manifest).await?;
    Ok(Some((
        Suggestion {
            digest: policy_digest,
            text,
        },
        docs,
    )))
}

/// The WIT files a suggestion's manifest carries, each checked for name, size and digest.
async fn docs(registry: &Registry, manifest: &Manifest) -> Result<Vec<WitFile>, OciError> {
    let layers: Vec<&Descriptor> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == WIT_LAYER)
        .collect();
    if layers.len() > WIT_FILES {
        return Err(OciError::Layout(format!(
            "the tool's docs are {} WIT files, more than the {WIT_FILES} warden takes",
            layers.len()
        )));
    }
    let mut docs: Vec<WitFile> = Vec::new();
    for layer in layers {
        let name = layer.annotations.get(TITLE).map_or("", String::as_str);
        let what = format!("the WIT file `{}`", name.escape_default());
        let text = registry.blob(layer, WIT_LIMIT, &what).await?;
        let doc = WitFile::new(name, text)?;
        if docs.iter().any(|d| d.name == doc.name) {
            return Err(OciError::Layout(format!("{what} is there twice")));
        }
        docs.push(doc);
    }
    Ok(docs)
}
