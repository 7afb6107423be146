//! Where things are in a host sandbox's own root, shared by warden (which checks a policy's
//! roots at load) and the helper (which mounts them, [`crate::mounts`]): the host's system
//! folders as they are, the sandbox's own `/tmp` (and, with credentials, [`TRUST_MOUNT`]),
//! and each granted root at its guest path. Nothing else of the host's is there.

use crate::plan::{Root, TRUST_MOUNT};
use std::path::Path;
use warden_core::FsGrant;

/// The host's folders every sandbox sees as they are: what programs need to start (Landlock
/// then allows reading only some of them, `crate::landlock`), and `/proc`, whose links
/// programs read though Landlock refuses to open its files (`ttyname`, `/proc/self/exe`).
/// Missing ones are left out.
pub(crate) const SYSTEM_FOLDERS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev", "/proc",
];

/// The sandbox's own `/tmp`, a tmpfs no root may take the place of.
pub(crate) const TMP: &str = "/tmp";

/// Where a session's sandbox whose roots have views keeps, under a cover (an empty tmpfs no
/// one may enter, mounted over them), a copy of each viewed root at `roots/N` and warden's
/// views folder at `views`: what a shell beside the session's makes its own views from
/// (`crate::join`). The session's shell cannot reach them: it may not unmount the cover (no
/// privilege in its namespaces), and Landlock grants it nothing there.
pub(crate) const STASH: &str = "/.warden";

/// The system folder `guest` is (or is in), if any: a root there is seen through that folder
/// at its own host path, not mounted.
pub(crate) fn system_folder(guest: &Path) -> Option<&'static str> {
    SYSTEM_FOLDERS
        .iter()
        .copied()
        .find(|f| guest.starts_with(f))
}

/// Whether the sandbox sees `root` through a view, where its calls are transactions: a
/// writable root it mounts (one in a system folder is seen there as it is).
pub(crate) fn viewed(root: &Root) -> bool {
    root.writable && system_folder(&root.guest).is_none()
}

/// The first grant the sandbox cannot show at its guest path, and why (with the fix). `trust`:
/// the sandbox has credentials, so a tmpfs of its own is at [`TRUST_MOUNT`].
pub(crate) fn misplaced(grants: &[FsGrant], trust: bool) -> Option<(usize, String)> {
    grants.iter().enumerate().find_map(|(index, grant)| {
        why_misplaced(grant, grants, trust).map(|message| (index, message))
    })
}

fn why_misplaced(grant: &FsGrant, grants: &[FsGrant], trust: bool) -> Option<String> {
    let (host, guest) = (&grant.host, Path::new(&grant.guest));
    let elsewhere = "give the grant a `guest` elsewhere, such as guest = \"/workspace\"";
    if guest == Path::new("/") {
        return Some(format!(
            "the root {} cannot be seen at /, which would hide the system folders programs \
             start from: {elsewhere}",
            host.display()
        ));
    }
    if let Some(folder) = system_folder(guest)
        && guest != host
    {
        return Some(format!(
            "the guest path {} is in {folder}, which a host sandbox shares with the host as it \
             is (programs start from it), so nothing can be mounted there: {elsewhere}, outside \
             {}",
            guest.display(),
            SYSTEM_FOLDERS.join(", ")
        ));
    }
    if guest == Path::new(TMP) {
        return Some(format!(
            "the root {} would be seen at {TMP}, the sandbox's own: {elsewhere}",
            host.display()
        ));
    }
    if guest.starts_with(STASH) {
        return Some(format!(
            "the root {} would be seen below {STASH}, where a host session keeps what the \
             commands beside its shell see their read-write roots through: {elsewhere}",
            host.display()
        ));
    }
    if trust && guest.starts_with(TRUST_MOUNT) {
        return Some(format!(
            "the root {} would be seen below {TRUST_MOUNT}, where a host sandbox with \
             credentials gets a folder of its own for the CA bundle it trusts: {elsewhere}",
            host.display()
        ));
    }
    // A root seen inside another is mounted on a folder of that one, which must be there: the
    // sandbox never writes into a root to make one.
    grants.iter().find_map(|outer| {
        let inside = guest.strip_prefix(&outer.guest).ok()?;
        let missing = !inside.as_os_str().is_empty()
            && system_folder(Path::new(&outer.guest)).is_none()
            && !outer.host.join(inside).is_dir();
        missing.then(|| {
            format!(
                "the guest path {} is inside the root {} (seen at {}), which has no folder {}: \
                 create it there, or {elsewhere}",
                guest.display(),
                outer.host.display(),
                outer.guest,
                inside.display()
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use warden_core::Access;

    fn grant(host: &Path, guest: &str) -> FsGrant {
        FsGrant {
            host: host.to_owned(),
            guest: guest.into(),
            access: Access::ReadOnly,
        }
    }

    #[test]
    fn a_guest_where_the_sandbox_keeps_its_own_folders_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().to_owned();
        for (guest, words) in [
            ("/", "hide the system folders"),
            ("/usr/src/ws", "is in /usr"),
            ("/etc", "is in /etc"),
            ("/tmp", "the sandbox's own"),
            ("/.warden/w", "where a host session keeps"),
        ] {
            let (_, e) = misplaced(&[grant(&ws, guest)], false).expect(guest);
            assert!(e.contains(words), "{guest}: {e}");
            assert!(e.contains("guest = \"/workspace\""), "{guest}: {e}");
        }
        let (_, e) = misplaced(&[grant(&ws, "/run/ws")], true).expect("below /run");
        assert!(e.contains("CA bundle"), "{e}");
        assert!(misplaced(&[grant(&ws, "/run/ws")], false).is_none());
        // A root in a system folder is seen there as it is.
        let usr = PathBuf::from("/usr/share");
        assert!(misplaced(&[grant(&usr, "/usr/share")], false).is_none());
        assert!(misplaced(&[grant(&ws, "/workspace"), grant(&ws, "/tmp/x")], false).is_none());
    }

    #[test]
    fn a_root_inside_another_needs_a_folder_there() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let outer = grant(dir.path(), "/w");
        assert!(misplaced(&[outer.clone(), grant(dir.path(), "/w/sub")], false).is_none());
        let (index, e) =
            misplaced(&[outer, grant(dir.path(), "/w/nothing/here")], false).expect("refused");
        assert_eq!(index, 1);
        assert!(e.contains("no folder nothing/here"), "{e}");
    }

    #[test]
    fn landlock_reads_only_in_the_system_folders() {
        for path in crate::landlock::SYSTEM
            .iter()
            .chain(crate::landlock::DEVICES)
        {
            assert!(system_folder(Path::new(path)).is_some(), "{path}");
        }
    }
}
