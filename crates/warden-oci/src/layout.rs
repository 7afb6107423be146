//! The artifacts' layout: a component as the Wasm OCI artifact of oci-wasm and `wkg` (one
//! `application/wasm` layer, a `application/vnd.wasm.config.v0+json` config naming the
//! component's imports and exports), and the policy's suggestion beside it, a manifest whose
//! `subject` is the component's.

use crate::error::OciError;
use crate::reference::Digest;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An OCI image manifest.
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The Wasm artifact's config.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The Wasm artifact's one layer: the component's bytes.
pub const WASM_LAYER: &str = "application/wasm";
/// The artifact type of the policy's suggestion.
pub const POLICY_ARTIFACT: &str = "application/vnd.warden.policy.v1";
/// The suggestion's layer: the policy's `[grants]` and `[limits]`, as TOML.
pub const POLICY_LAYER: &str = "application/vnd.warden.policy.v1+toml";
/// A WIT file of the tool's docs, beside its suggestion; its file name in [`TITLE`].
pub const WIT_LAYER: &str = "application/vnd.warden.wit.v1";
/// The OCI annotation that names a layer's file.
pub const TITLE: &str = "org.opencontainers.image.title";
/// The OCI annotation that says when an artifact was made (RFC 3339).
pub const CREATED: &str = "org.opencontainers.image.created";
/// The OCI empty config, for artifacts that need none.
pub const EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";

/// The most warden reads of a manifest or a config (the distribution spec's own limit).
pub const MANIFEST_LIMIT: u64 = 4 << 20;
/// The most warden reads of a component (the 18 MB Python tools fit five times over).
pub const COMPONENT_LIMIT: u64 = 100 << 20;
/// The most warden reads of a policy's suggestion.
pub const POLICY_LIMIT: u64 = 256 << 10;
/// The most warden reads of one WIT file.
pub const WIT_LIMIT: u64 = 256 << 10;
/// The most WIT files a tool's docs may have.
pub const WIT_FILES: usize = 32;

/// A blob as a manifest names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The descriptor of `bytes` as `media_type`.
    pub fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_owned(),
            digest: Digest::of(bytes).to_string(),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        }
    }

    /// Its digest, checked for form.
    pub fn digest(&self) -> Result<Digest, OciError> {
        Digest::parse(&self.digest)
    }
}

/// An OCI image manifest, as warden writes and reads them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default)]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Manifest {
    fn new(config: Descriptor, layers: Vec<Descriptor>) -> Manifest {
        Manifest {
            schema_version: 2,
            media_type: Some(MANIFEST.to_owned()),
            artifact_type: None,
            config,
            layers,
            subject: None,
            annotations: BTreeMap::new(),
        }
    }

    /// Its bytes, as pushed and as their digest is taken.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A manifest of strings, numbers and maps always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses the bytes of a manifest warden fetched.
    pub fn parse(bytes: &[u8], what: &str) -> Result<Manifest, OciError> {
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| OciError::Layout(format!("{what} is not an OCI image manifest: {e}")))?;
        if manifest.schema_version != 2 {
            return Err(OciError::Layout(format!(
                "{what} has schemaVersion {}, not 2",
                manifest.schema_version
            )));
        }
        if manifest
            .media_type
            .as_deref()
            .is_some_and(|m| m != MANIFEST)
        {
            return Err(OciError::Layout(format!(
                "{what} is a {}, not an OCI image manifest",
                manifest.media_type.as_deref().unwrap_or_default()
            )));
        }
        Ok(manifest)
    }
}

/// The config of a Wasm artifact (oci-wasm's `WasmConfig`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    pub architecture: String,
    pub os: String,
    pub layer_digests: Vec<String>,
    pub component: ComponentWorld,
}

/// What a component imports and exports, by name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ComponentWorld {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    #[serde(default)]
    pub target: Option<String>,
}

/// A component made ready to push: its manifest, config and layer.
#[derive(Debug, Clone)]
pub struct ComponentArtifact {
    pub manifest: Manifest,
    pub config: Vec<u8>,
    pub component: Vec<u8>,
}

impl ComponentArtifact {
    /// The artifact of `component`'s bytes, which must be a component, made at `created`
    /// (RFC 3339): in its manifest's annotations and, as oci-wasm writes it, in its config.
    pub fn new(component: Vec<u8>, created: &str) -> Result<ComponentArtifact, OciError> {
        let world = world_of(&component)?;
        let layer = Descriptor::of(WASM_LAYER, &component);
        let config = WasmConfig {
            created: Some(created.to_owned()),
            architecture: "wasm".to_owned(),
            os: "wasip2".to_owned(),
            layer_digests: vec![layer.digest.clone()],
            component: world,
        };
        let config = serde_json::to_vec(&config).unwrap_or_default();
        let mut manifest = Manifest::new(Descriptor::of(WASM_CONFIG, &config), vec![layer]);
        manifest
            .annotations
            .insert(CREATED.to_owned(), created.to_owned());
        Ok(ComponentArtifact {
            manifest,
            config,
            component,
        })
    }
}

/// A WIT file that travels with its tool: the folder a policy's `wit` names holds the docs
/// the tool's description and schema come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitFile {
    /// A plain file name ending in `.wit`: never a path.
    pub name: String,
    pub text: Vec<u8>,
}

impl WitFile {
    /// Checks that `name` is a plain `*.wit` file name, so that what a registry says cannot
    /// name a path on this machine.
    pub fn new(name: &str, text: Vec<u8>) -> Result<WitFile, OciError> {
        let plain = name
            .strip_suffix(".wit")
            .is_some_and(|stem| !stem.is_empty() && !stem.starts_with('.'))
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !plain {
            return Err(OciError::Layout(format!(
                "`{}` is not a WIT file's name (letters, digits, `-`, `_` and `.`, ending in \
                 `.wit`)",
                name.escape_default()
            )));
        }
        Ok(WitFile {
            name: name.to_owned(),
            text,
        })
    }

    /// Its layer: the text as [`WIT_LAYER`], its name in [`TITLE`].
    pub fn descriptor(&self) -> Descriptor {
        let mut layer = Descriptor::of(WIT_LAYER, &self.text);
        layer
            .annotations
            .insert(TITLE.to_owned(), self.name.clone());
        layer
    }
}

/// The policy's suggestion and the tool's WIT docs, made ready to push beside the component
/// whose manifest is `subject`.
#[derive(Debug, Clone)]
pub struct PolicyArtifact {
    pub manifest: Manifest,
    pub suggestion: Vec<u8>,
}

/// The OCI empty config's bytes.
pub const EMPTY: &[u8] = b"{}";

impl PolicyArtifact {
    /// The suggestion's manifest: its layer first, then one layer per file of `docs`.
    pub fn new(suggestion: String, docs: &[WitFile], subject: Descriptor) -> PolicyArtifact {
        let suggestion = suggestion.into_bytes();
        let mut layers = vec![Descriptor::of(POLICY_LAYER, &suggestion)];
        layers.extend(docs.iter().map(WitFile::descriptor));
        let mut manifest = Manifest::new(Descriptor::of(EMPTY_CONFIG, EMPTY), layers);
        manifest.artifact_type = Some(POLICY_ARTIFACT.to_owned());
        manifest.subject = Some(subject);
        PolicyArtifact {
            manifest,
            suggestion,
        }
    }
}

/// Checks that `manifest` is a Wasm artifact: a Wasm config and exactly one `application/wasm`
/// layer, each small enough; answers the layer.
pub fn component_layer(manifest: &Manifest, what: &str) -> Result<Descriptor, OciError> {
    if manifest.config.media_type != WASM_CONFIG {
        return Err(OciError::Layout(format!(
            "{what} is not a Wasm artifact: its config is a {}, not a {WASM_CONFIG}",
            manifest.config.media_type
        )));
    }
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_LAYER => {
            if layer.size > COMPONENT_LIMIT {
                return Err(OciError::TooLarge {
                    what: format!("{what}'s component"),
                    limit: COMPONENT_LIMIT,
                });
            }
            layer.digest()?;
            Ok(layer.clone())
        }
        layers => Err(OciError::Layout(format!(
            "{what} is not a Wasm artifact: it has {} layers ({}) where one {WASM_LAYER} layer \
             is the component",
            layers.len(),
            layers
                .iter()
                .map(|l| l.media_type.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The names a component imports and exports at its top level.
pub fn world_of(component: &[u8]) -> Result<ComponentWorld, OciError> {
    use wasmparser::{Parser, Payload};
    let not = |why: String| OciError::Layout(format!("not a WebAssembly component: {why}"));
    let mut world = ComponentWorld::default();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(component) {
        match payload.map_err(|e| not(e.to_string()))? {
            Payload::Version { encoding, .. }
                if depth == 0 && encoding != wasmparser::Encoding::Component =>
            {
                return Err(not(
                    "a core module (build the tool for wasm32-wasip2)".into()
                ));
            }
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(imports) if depth == 0 => {
                for import in imports {
                    let import = import.map_err(|e| not(e.to_string()))?;
                    world.imports.push(import.name.name.to_owned());
                }
            }
            Payload::ComponentExportSection(exports) if depth == 0 => {
                for export in exports {
                    let export = export.map_err(|e| not(e.to_string()))?;
                    world.exports.push(export.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(world)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wit_file_is_named_by_a_plain_name_and_never_a_path() {
        for good in ["world.wit", "my-tool_v2.wit", "a.b.wit"] {
            assert!(WitFile::new(good, Vec::new()).is_ok(), "{good}");
        }
        for bad in [
            "../world.wit",
            "deps/world.wit",
            "/etc/world.wit",
            ".wit",
            ".hidden.wit",
            "world.txt",
            "world",
            "",
            "wörld.wit",
            "a\\b.wit",
        ] {
            assert!(WitFile::new(bad, Vec::new()).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_docs_follow_the_suggestion_each_named_by_its_title() {
        let docs = [WitFile::new("world.wit", b"package a:b;".to_vec()).unwrap()];
        let subject = Descriptor::of(MANIFEST, b"{}");
        let artifact = PolicyArtifact::new("[grants]\n".into(), &docs, subject);
        let layers = &artifact.manifest.layers;
        assert_eq!(layers.len(), 2);
        assert_eq!(layers[0].media_type, POLICY_LAYER);
        assert_eq!(layers[1].media_type, WIT_LAYER);
        assert_eq!(layers[1].annotations[TITLE], "world.wit");
        assert_eq!(layers[1].digest, Digest::of(b"package a:b;").to_string());
    }
}
