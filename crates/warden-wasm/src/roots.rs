//! Which granted filesystem roots a call opened. wasmtime-wasi has no filesystem hook, so the
//! `wasi:filesystem` functions that reach through a directory descriptor are shadowed in the
//! linker by wrappers that note the root when the descriptor is one, then run wasmtime-wasi's
//! own implementation. Only policies with roots are linked this way: a tool without roots
//! pays nothing.
//!
//! A descriptor opened under a root exists only if the root was used first, so only the roots'
//! own descriptors are checked. They are known by the host handle every copy shares (each
//! `get-directories` hands out new table entries for the same handles), so a table slot that
//! a dropped root leaves to another descriptor is never taken for the root.

use std::sync::Arc;
use warden_core::Meter;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::filesystem::{Descriptor as HostFd, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::preopens;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, Descriptor, DescriptorFlags, DescriptorStat, DirectoryEntryStream, ErrorCode,
    HostDescriptor, MetadataHashValue, NewTimestamp, OpenFlags, PathFlags,
};

/// The interfaces shadowed, at the version wasmtime-wasi 48 links (components built against
/// an older 0.2 release resolve to it too).
const TYPES: &str = "wasi:filesystem/types@0.2.12";
const PREOPENS: &str = "wasi:filesystem/preopens@0.2.12";

/// The roots one call was handed, and where their use is reported once the sandbox is bound
/// to its call.
#[derive(Default)]
pub(crate) struct Roots {
    /// Each root's host handle and the path the guest sees it at.
    known: Vec<(Arc<std::fs::File>, String)>,
    meter: Option<Meter>,
}

impl Roots {
    /// Reports the roots' use to the call's `meter` from now on.
    pub(crate) fn bind(&mut self, meter: Meter) {
        self.meter = Some(meter);
    }

    /// Learns the roots from what `get-directories` handed the guest.
    pub(crate) fn learn(&mut self, table: &ResourceTable, dirs: &[(Resource<Descriptor>, String)]) {
        for (fd, guest) in dirs {
            if let Ok(HostFd::Dir(d)) = table.get(fd)
                && !self.known.iter().any(|(h, _)| Arc::ptr_eq(h, &d.dir))
            {
                self.known.push((d.dir.clone(), guest.clone()));
            }
        }
    }

    /// Reports `fd`'s root when `fd` is one.
    pub(crate) fn note(&self, table: &ResourceTable, fd: &Resource<Descriptor>) {
        if self.known.is_empty() {
            return;
        }
        if let Some(meter) = &self.meter
            && let Ok(HostFd::Dir(d)) = table.get(fd)
            && let Some((_, guest)) = self.known.iter().find(|(h, _)| Arc::ptr_eq(h, &d.dir))
        {
            meter.open_root(guest);
        }
    }
}

/// A store's data that holds the call's roots: what the shadowed functions tell them.
pub(crate) trait RootsView: WasiView {
    /// Reports `fd`'s root when `fd` is one of the preopened roots.
    fn note_root(&self, fd: &Resource<Descriptor>);

    /// Learns the roots from what `get-directories` handed the guest.
    fn learn_roots(&mut self, dirs: &[(Resource<Descriptor>, String)]);
}

/// Shadows one descriptor method: notes the roots among the descriptors named in `roots`,
/// then calls wasmtime-wasi's implementation and converts its error as its bindings do.
macro_rules! observed {
    ($inst:ident, $name:literal, $method:ident($($arg:ident: $ty:ty),*) -> $ok:ty, roots: [$($fd:ident),+]) => {
        $inst.func_wrap_async(
            $name,
            |mut store: StoreContextMut<'_, T>, ($($arg,)*): ($($ty,)*)| {
                Box::new(async move {
                    let state = store.data_mut();
                    $(state.note_root(&$fd);)+
                    let mut fs = state.filesystem();
                    let result: Result<$ok, ErrorCode> =
                        match HostDescriptor::$method(&mut fs, $($arg),*).await {
                            Ok(v) => Ok(v),
                            Err(e) => Err(types::Host::convert_error_code(&mut fs, e)?),
                        };
                    Ok((result,))
                })
            },
        )?;
    };
}

/// Links the wrappers over wasmtime-wasi's filesystem (already in `linker`).
///
/// Observed, per `wasi:filesystem/types@0.2.12`: every method that takes a path
/// (`open-at`, `stat-at`, `set-times-at`, `link-at` and `rename-at` on both descriptors,
/// `readlink-at`, `create-directory-at`, `remove-directory-at`, `unlink-file-at`,
/// `symlink-at`, `metadata-hash-at`), `read-directory`, and those that read or change the
/// root folder itself (`stat`, `set-times`, `metadata-hash`). Not observed: `get-type`,
/// `get-flags`, `is-same-object`, `sync`, `sync-data` (they answer from the handle and reach
/// nothing in the folder), and the file methods (`read`, `write`, the streams, `advise`,
/// `set-size`), which fail on a directory.
pub(crate) fn observe<T: RootsView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    {
        let mut t = linker.instance(TYPES)?;
        type Fd = Resource<Descriptor>;
        observed!(t, "[method]descriptor.read-directory",
            read_directory(fd: Fd) -> Resource<DirectoryEntryStream>, roots: [fd]);
        observed!(t, "[method]descriptor.stat",
            stat(fd: Fd) -> DescriptorStat, roots: [fd]);
        observed!(t, "[method]descriptor.set-times",
            set_times(fd: Fd, atim: NewTimestamp, mtim: NewTimestamp) -> (), roots: [fd]);
        observed!(t, "[method]descriptor.metadata-hash",
            metadata_hash(fd: Fd) -> MetadataHashValue, roots: [fd]);
        observed!(t, "[method]descriptor.create-directory-at",
            create_directory_at(fd: Fd, path: String) -> (), roots: [fd]);
        observed!(t, "[method]descriptor.stat-at",
            stat_at(fd: Fd, pf: PathFlags, path: String) -> DescriptorStat, roots: [fd]);
        observed!(t, "[method]descriptor.set-times-at",
            set_times_at(fd: Fd, pf: PathFlags, path: String, atim: NewTimestamp,
                mtim: NewTimestamp) -> (), roots: [fd]);
        observed!(t, "[method]descriptor.link-at",
            link_at(fd: Fd, pf: PathFlags, old: String, new_fd: Fd, new: String) -> (),
            roots: [fd, new_fd]);
        observed!(t, "[method]descriptor.open-at",
            open_at(fd: Fd, pf: PathFlags, path: String, of: OpenFlags, df: DescriptorFlags)
                -> Fd, roots: [fd]);
        observed!(t, "[method]descriptor.readlink-at",
            readlink_at(fd: Fd, path: String) -> String, roots: [fd]);
        observed!(t, "[method]descriptor.remove-directory-at",
            remove_directory_at(fd: Fd, path: String) -> (), roots: [fd]);
        observed!(t, "[method]descriptor.rename-at",
            rename_at(fd: Fd, old: String, new_fd: Fd, new: String) -> (), roots: [fd, new_fd]);
        observed!(t, "[method]descriptor.symlink-at",
            symlink_at(fd: Fd, old: String, new: String) -> (), roots: [fd]);
        observed!(t, "[method]descriptor.unlink-file-at",
            unlink_file_at(fd: Fd, path: String) -> (), roots: [fd]);
        observed!(t, "[method]descriptor.metadata-hash-at",
            metadata_hash_at(fd: Fd, pf: PathFlags, path: String) -> MetadataHashValue,
            roots: [fd]);
    }
    linker.instance(PREOPENS)?.func_wrap(
        "get-directories",
        |mut store: StoreContextMut<'_, T>, (): ()| {
            let state = store.data_mut();
            let dirs = preopens::Host::get_directories(&mut state.filesystem())?;
            state.learn_roots(&dirs);
            Ok((dirs,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use wit_parser::{FunctionKind, Resolve, Type, TypeDefKind};

    /// The methods `observe` shadows (a test reads them back from its source).
    const OBSERVED: [&str; 15] = [
        "read-directory",
        "stat",
        "set-times",
        "metadata-hash",
        "create-directory-at",
        "stat-at",
        "set-times-at",
        "link-at",
        "open-at",
        "readlink-at",
        "remove-directory-at",
        "rename-at",
        "symlink-at",
        "unlink-file-at",
        "metadata-hash-at",
    ];

    /// The methods left plain: they answer from the handle, or are file methods that fail on
    /// a directory.
    const PLAIN: [&str; 14] = [
        "read-via-stream",
        "write-via-stream",
        "append-via-stream",
        "advise",
        "sync-data",
        "get-flags",
        "get-type",
        "set-size",
        "read",
        "write",
        "sync",
        "is-same-object",
        // The only methods of the other resource, `directory-entry-stream`, and of `error`:
        // neither reaches a root by itself.
        "read-directory-entry",
        "filesystem-error-code",
    ];

    /// The machine's target triple, as rustc names it.
    fn host_triple() -> String {
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        let out = std::process::Command::new(rustc)
            .arg("-vV")
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("host: "))
            .unwrap()
            .to_owned()
    }

    /// The WIT wasmtime-wasi links, from its sources in cargo's registry. Offline, for this
    /// machine's platform only: the dependencies of other platforms (macOS's TLS roots) were
    /// never downloaded.
    fn linked_wit() -> std::path::PathBuf {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = std::process::Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--offline", "--locked"])
            .args(["--filter-platform", &host_triple()])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let manifest = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "wasmtime-wasi")
            .and_then(|p| p["manifest_path"].as_str())
            .unwrap();
        std::path::Path::new(manifest).with_file_name("src/p2/wit")
    }

    /// Every function of `wasi:filesystem/types` is decided, and every method that takes a
    /// path or another descriptor, or reads a directory, is observed: a wasmtime-wasi upgrade
    /// that adds one fails here.
    #[test]
    fn every_path_taking_method_of_the_linked_wit_is_observed() {
        let mut resolve = Resolve::new();
        resolve.push_path(linked_wit()).unwrap();
        let (_, types) = resolve
            .interfaces
            .iter()
            .find(|(_, i)| {
                i.name.as_deref() == Some("types")
                    && i.package.is_some_and(|p| {
                        let name = &resolve.packages[p].name;
                        name.namespace == "wasi" && name.name == "filesystem"
                    })
            })
            .unwrap();
        let package = &resolve.packages[types.package.unwrap()].name;
        assert_eq!(
            package.version.as_ref().map(ToString::to_string).as_deref(),
            super::TYPES.rsplit_once('@').map(|(_, v)| v),
            "the shadowed interfaces name the linked version"
        );
        let mut seen = BTreeSet::new();
        for (name, f) in &types.functions {
            let short = name.rsplit('.').next().unwrap_or(name);
            seen.insert(short.to_owned());
            let reaches = f.params.iter().skip(1).any(|p| match p.ty {
                Type::String => true,
                Type::Id(id) => matches!(resolve.types[id].kind, TypeDefKind::Handle(_)),
                _ => false,
            }) || short == "read-directory";
            let method = matches!(f.kind, FunctionKind::Method(_));
            if method && reaches && short != "is-same-object" {
                assert!(OBSERVED.contains(&short), "{name} takes a path: observe it");
            }
            assert!(
                OBSERVED.contains(&short) || PLAIN.contains(&short),
                "{name} is new: decide whether it reaches through a root"
            );
        }
        // What `observe` links is what this test judges.
        let prefix = "\"[method]descriptor.";
        let linked: BTreeSet<&str> = include_str!("roots.rs")
            .split(prefix)
            .skip(1)
            .filter_map(|rest| rest.split_once('"').map(|(name, _)| name))
            // The prefix's own literal, above.
            .filter(|name| !name.is_empty())
            .collect();
        assert_eq!(linked, OBSERVED.into_iter().collect());
        let decided: BTreeSet<String> = OBSERVED
            .iter()
            .chain(&PLAIN)
            .map(std::string::ToString::to_string)
            .collect();
        assert_eq!(seen, decided);
    }
}
