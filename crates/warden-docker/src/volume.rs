//! The engine's own volumes that warden mounts: a container's copied roots (tmpfs) and its
//! calls' views (overlay).

use bollard::models::{Mount, MountType, MountVolumeOptions, MountVolumeOptionsDriverConfig};
use std::collections::HashMap;

/// An anonymous volume of the engine's `local` driver at `target`: a filesystem of type `fs`
/// (its device named alike) mounted with `options`, gone with its container. The image's own
/// files at `target` are never copied into it.
pub(crate) fn local_volume(target: String, fs: &str, options: String) -> Mount {
    Mount {
        target: Some(target),
        typ: Some(MountType::VOLUME),
        read_only: Some(false),
        volume_options: Some(MountVolumeOptions {
            no_copy: Some(true),
            driver_config: Some(MountVolumeOptionsDriverConfig {
                name: Some("local".into()),
                options: Some(HashMap::from([
                    ("type".to_owned(), fs.to_owned()),
                    ("device".to_owned(), fs.to_owned()),
                    ("o".to_owned(), options),
                ])),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
