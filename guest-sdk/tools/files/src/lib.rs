//! Example tool: reads, lists and writes files under `/workspace`.
//!
//! Paths are used as given: what may be reached is for the host's sandbox to
//! decide, not for the tool.

use std::fs;

use warden_guest::{ErrorText, workspace_path};

warden_guest::wit_bindgen::generate!({
    runtime_path: "warden_guest::wit_bindgen::rt",
});

struct Files;

impl Guest for Files {
    fn read_file(path: String) -> Result<String, String> {
        let path = workspace_path(path);
        fs::read_to_string(&path).err_at(&path)
    }

    fn list_dir(path: String) -> Result<Vec<Entry>, String> {
        let path = workspace_path(path);
        let mut entries = Vec::new();
        for entry in fs::read_dir(&path).err_at(&path)? {
            let entry = entry.err_at(&path)?;
            let meta = entry.metadata().err_at(entry.path())?;
            entries.push(Entry {
                name: entry.file_name().to_string_lossy().into_owned(),
                is_dir: meta.is_dir(),
                size: meta.len(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn write_file(path: String, contents: String) -> Result<u64, String> {
        let path = workspace_path(path);
        fs::write(&path, &contents).err_at(&path)?;
        Ok(contents.len() as u64)
    }
}

export!(Files);
