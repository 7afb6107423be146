//! The host executor's helper as a program of its own, for embedders whose binary cannot
//! re-execute itself (and for this crate's tests): `Helper { program: <this>, args: [] }`.

fn main() {
    warden_host::helper_program_main()
}
