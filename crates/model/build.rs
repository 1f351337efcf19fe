//! Link settings for every crate that links libtorch (the CLI reuses this file as its build script).
//!
//! * tch embeds no rpath, so binaries and test executables would need LD_LIBRARY_PATH. torch-sys
//!   (`links = "tch"`) exports its library folder to direct dependents as DEP_TCH_LIBTORCH_LIB; embedding
//!   it as an rpath makes `cargo test` and `cargo run` work as they are.
//! * rustc links with `--as-needed`, which drops libtorch_cuda (nothing references its symbols directly;
//!   it registers the CUDA backend from static initialisers). The `cuda` feature keeps it.
//! * The probe's CUDA kernel looks for NVRTC beside that libtorch (`SHARPDRAFT_LIBTORCH_LIB`).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo:rustc-env=SHARPDRAFT_LIBTORCH_LIB={lib}");
        if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
            println!("cargo:rustc-link-search=native={lib}");
            // The CUDA runtime libraries libtorch_cuda needs are on the GPU machine, not necessarily here.
            println!("cargo:rustc-link-arg=-Wl,--allow-shlib-undefined");
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
            println!("cargo:rustc-link-arg=-ltorch_cuda");
            println!("cargo:rustc-link-arg=-ltorch");
            println!("cargo:rustc-link-arg=-Wl,--as-needed");
        }
    }
}
