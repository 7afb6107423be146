//! warden's host helper as a small program installed beside `warden`: warden starts it once
//! as the fork server of its confined host processes rather than itself (docs/host.md:
//! "Host processes").

fn main() {
    warden_host::helper_program_main()
}
