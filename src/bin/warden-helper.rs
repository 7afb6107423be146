//! warden's host helper as a small program installed beside `warden`: warden starts it for
//! each confined host process rather than re-executing itself, whose much larger binary
//! costs more to load at every call (README: "Host processes", and its benchmarks).

fn main() {
    warden_host::helper_program_main()
}
