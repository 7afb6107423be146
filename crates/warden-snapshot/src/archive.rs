//! The archive of a snapshot: what `tar` in the sandbox wrote, checked and written again by
//! warden, so that what is kept (and restored) holds only plain relative paths.

use std::collections::HashSet;
use std::io::Read;
use tar::{Archive, Builder, EntryType, Header};

/// Why an archive is refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ArchiveError {
    #[error("the archive is not a tar archive warden can read: {0}")]
    Unreadable(String),
    #[error(
        "the archive names {0:?}, which is not a plain path below its root (absolute, or with `..`)"
    )]
    OutOfRoot(String),
    #[error(
        "the archive puts {path:?} below {link:?}, a symbolic link it holds: a restore would write through it"
    )]
    BelowLink { path: String, link: String },
    #[error("the archive holds {path:?}, a {kind} (only files, folders and links are kept)")]
    Kind { path: String, kind: &'static str },
    #[error("the archive links {path:?} to {target:?}, outside its root")]
    HardLinkOut { path: String, target: String },
}

/// `archive` (tar archives one after another, as the sandbox's `tar` wrote one a folder)
/// checked and written again as one, as a snapshot keeps it: its entries in order, every path
/// relative and without `..`, none below a symbolic link of the archive, hard links only to
/// paths of the archive. Left out: the root folder's own entry (`./`: the sandbox's `/tmp` is
/// not the user's to change), what lies at or below `skip` (`./a/b`: the policy's roots,
/// mounts of their own), and FIFOs and devices (a snapshot keeps files, folders and links).
pub fn rewritten(archive: &[u8], skip: &[&str]) -> Result<Vec<u8>, ArchiveError> {
    whole(archive, archive.len(), skip, false)
}

/// A kept archive checked again and cut for a restore: as [`rewritten`], but a FIFO or a
/// device is refused (warden never keeps one: the archive was edited), and the entries come
/// as archives one after another, each at most `max` bytes but for one entry larger than
/// that alone: what a restore unpacks a command at a time.
pub fn split(archive: &[u8], skip: &[&str], max: usize) -> Result<Vec<Vec<u8>>, ArchiveError> {
    rewrite(archive, archive.len(), skip, max, true)
}

/// A kept archive of `len` bytes, read from `archive`, checked again whole for a restore
/// that moves it in one piece: as [`split`] with no bound. Read as it is parsed, not first
/// into memory.
pub fn checked(archive: impl Read, len: usize, skip: &[&str]) -> Result<Vec<u8>, ArchiveError> {
    whole(archive, len, skip, true)
}

/// [`rewrite`] in one piece (an empty archive is its end: two zero blocks).
fn whole(
    archive: impl Read,
    len: usize,
    skip: &[&str],
    refuse_special: bool,
) -> Result<Vec<u8>, ArchiveError> {
    let mut whole = rewrite(archive, len, skip, usize::MAX, refuse_special)?;
    Ok(whole.pop().unwrap_or_else(|| vec![0; 1024]))
}

/// Rewrites `archive`, of `len` bytes (a hint for the buffers).
fn rewrite(
    archive: impl Read,
    len: usize,
    skip: &[&str],
    max: usize,
    refuse_special: bool,
) -> Result<Vec<Vec<u8>>, ArchiveError> {
    let unreadable = |e: std::io::Error| ArchiveError::Unreadable(e.to_string());
    let skip: Vec<String> = skip.iter().filter_map(|s| plain(s)).collect();
    let mut reader = Archive::new(archive);
    reader.set_ignore_zeros(true);
    let mut groups = Vec::new();
    // Sized ahead: many megabytes are copied in, which a growing buffer would copy again.
    let room = len.min(max).saturating_add(1024);
    let mut out = Builder::new(Vec::with_capacity(room));
    let mut links: HashSet<String> = HashSet::new();
    let mut seen: HashSet<String> = HashSet::new();
    for entry in reader.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(path) = plain(&raw) else {
            return Err(ArchiveError::OutOfRoot(raw));
        };
        let skipped = |root: &String| path == *root || path.starts_with(&format!("{root}/"));
        if path.is_empty() || skip.iter().any(skipped) {
            continue;
        }
        if let Some(link) = below_link(&path, &links) {
            return Err(ArchiveError::BelowLink { path, link });
        }
        let kind = entry.header().entry_type();
        let mut header = Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(entry.header().mode().map_err(unreadable)? & 0o7777);
        header.set_mtime(entry.header().mtime().unwrap_or(0));
        header.set_size(0);
        match kind {
            EntryType::Regular | EntryType::Continuous => {
                header.set_entry_type(EntryType::Regular);
                let size = usize::try_from(entry.size()).unwrap_or(0);
                let mut data = Vec::with_capacity(size.min(len));
                entry.read_to_end(&mut data).map_err(unreadable)?;
                header.set_size(data.len() as u64);
                // Headers (a long name's too) and the data in 512-byte blocks.
                let size = 1536 + path.len() + data.len();
                if !out.get_ref().is_empty() && out.get_ref().len() + size > max {
                    let full = std::mem::replace(&mut out, Builder::new(Vec::with_capacity(room)));
                    groups.push(full.into_inner().map_err(unreadable)?);
                }
                out.append_data(&mut header, &path, data.as_slice())
                    .map_err(unreadable)?;
            }
            EntryType::Directory => {
                out.append_data(&mut header, &path, std::io::empty())
                    .map_err(unreadable)?;
            }
            EntryType::Symlink | EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .map(|t| String::from_utf8_lossy(&t).into_owned())
                    .unwrap_or_default();
                if kind == EntryType::Link {
                    // A hard link names a path of the archive, as a member is named.
                    match plain(&target) {
                        Some(t) if seen.contains(&t) => {
                            out.append_link(&mut header, &path, &t)
                                .map_err(unreadable)?;
                        }
                        _ => return Err(ArchiveError::HardLinkOut { path, target }),
                    }
                } else {
                    // A symbolic link is kept as it is, never followed: it points where it
                    // pointed in the sandbox.
                    out.append_link(&mut header, &path, &target)
                        .map_err(unreadable)?;
                    links.insert(path.clone());
                }
            }
            other if refuse_special => {
                return Err(ArchiveError::Kind {
                    path,
                    kind: kind_name(other),
                });
            }
            _ => continue,
        }
        seen.insert(path);
    }
    groups.push(out.into_inner().map_err(unreadable)?);
    Ok(groups)
}

/// `raw` as a plain relative path (`a/b`, the root as ""), or None when it is absolute or
/// climbs with `..`.
fn plain(raw: &str) -> Option<String> {
    if raw.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// The symbolic link of `links` that `path` lies below, if any.
fn below_link(path: &str, links: &HashSet<String>) -> Option<String> {
    let mut end = 0;
    while let Some(slash) = path[end..].find('/') {
        end += slash;
        if links.contains(&path[..end]) {
            return Some(path[..end].to_owned());
        }
        end += 1;
    }
    None
}

fn kind_name(kind: EntryType) -> &'static str {
    match kind {
        EntryType::Char => "character device",
        EntryType::Block => "block device",
        EntryType::Fifo => "FIFO",
        _ => "special file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archive of `entries`: (path, kind, data or link target), its names written raw.
    fn archive(entries: &[(&str, EntryType, &str)]) -> Vec<u8> {
        let mut b = Builder::new(Vec::new());
        for (path, kind, data) in entries {
            let mut h = Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            {
                let name = &mut h.as_old_mut().name;
                name[..path.len()].copy_from_slice(path.as_bytes());
            }
            if matches!(kind, EntryType::Symlink | EntryType::Link) {
                h.set_link_name(data).unwrap();
                h.set_size(0);
                h.set_cksum();
                b.append(&h, std::io::empty()).unwrap();
            } else {
                h.set_size(data.len() as u64);
                h.set_cksum();
                b.append(&h, data.as_bytes()).unwrap();
            }
        }
        b.into_inner().unwrap()
    }

    fn names(archive: &[u8]) -> Vec<String> {
        let mut a = Archive::new(archive);
        a.entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn plain_archives_are_kept_without_their_root_entry() {
        use EntryType::*;
        let a = archive(&[
            ("./", Directory, ""),
            ("./d/", Directory, ""),
            ("./d/f", Regular, "hello"),
            ("./l", Symlink, "/etc/shadow"),
            ("./h", Link, "./d/f"),
        ]);
        let kept = rewritten(&a, &[]).expect("a plain archive");
        assert_eq!(names(&kept), ["d", "d/f", "l", "h"]);
        let mut two = archive(&[("./a", Regular, "1"), ("./r/x", Regular, "in a root")]);
        two.extend(archive(&[("./b", Regular, "2")]));
        let kept = rewritten(&two, &["./r"]).expect("archives one after another");
        assert_eq!(names(&kept), ["a", "b"], "the root left out");
        let big = "x".repeat(3000);
        let parts = split(
            &archive(&[
                ("./a", Regular, "1"),
                ("./big", Regular, &big),
                ("./c", Regular, "3"),
            ]),
            &[],
            2048,
        )
        .unwrap();
        let listed: Vec<Vec<String>> = parts.iter().map(|p| names(p)).collect();
        assert_eq!(
            listed,
            [vec!["a"], vec!["big"], vec!["c"]],
            "whole entries, one too large alone"
        );
    }

    #[test]
    fn paths_out_of_the_root_below_links_or_special_are_refused() {
        use EntryType::*;
        let refused = |entries: &[(&str, EntryType, &str)]| {
            split(&archive(entries), &[], 1 << 20).unwrap_err()
        };
        assert!(matches!(
            refused(&[("../x", Regular, "")]),
            ArchiveError::OutOfRoot(_)
        ));
        assert!(matches!(
            refused(&[("a/../../x", Regular, "")]),
            ArchiveError::OutOfRoot(_)
        ));
        assert!(matches!(
            refused(&[("/etc/x", Regular, "")]),
            ArchiveError::OutOfRoot(_)
        ));
        assert!(matches!(
            refused(&[("./up", Symlink, "/etc"), ("./up/passwd", Regular, "x")]),
            ArchiveError::BelowLink { .. }
        ));
        assert!(matches!(
            refused(&[("./p", Fifo, "")]),
            ArchiveError::Kind { .. }
        ));
        let taken = rewritten(&archive(&[("./p", Fifo, ""), ("./f", Regular, "x")]), &[]).unwrap();
        assert_eq!(names(&taken), ["f"], "a snapshot leaves a FIFO out");
        assert!(matches!(
            refused(&[("./h", Link, "/etc/shadow")]),
            ArchiveError::HardLinkOut { .. }
        ));
        assert!(
            rewritten(&[], &[]).unwrap().iter().all(|&b| b == 0),
            "nothing to keep"
        );
    }
}
