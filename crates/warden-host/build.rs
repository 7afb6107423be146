//! The protocol between warden and its helper, as one id: a hash of this crate's source.
//! warden uses a helper program beside it only when that program answers with the same id,
//! so a helper left there by another build is never handed a plan it would read differently.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

fn main() {
    let mut hasher = DefaultHasher::new();
    hash_dir(Path::new("src"), &mut hasher);
    println!("cargo:rerun-if-changed=src");
    println!(
        "cargo:rustc-env=WARDEN_HOST_PROTOCOL={}-{:016x}",
        env!("CARGO_PKG_VERSION"),
        hasher.finish()
    );
}

/// Every file under `dir`, in name order, path and contents.
fn hash_dir(dir: &Path, hasher: &mut DefaultHasher) {
    let mut entries: Vec<_> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(e) => panic!("reading {}: {e}", dir.display()),
    };
    entries.sort();
    for path in entries {
        if path.is_dir() {
            hash_dir(&path, hasher);
        } else {
            path.hash(hasher);
            match std::fs::read(&path) {
                Ok(bytes) => bytes.hash(hasher),
                Err(e) => panic!("reading {}: {e}", path.display()),
            }
        }
    }
}
