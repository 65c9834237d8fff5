//! Generates the Rust types of `bpf/include/weir.h`, so no struct shared with
//! the BPF programs is ever written twice.
use std::{env, path::PathBuf};

fn main() {
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf/include");
    let header = include.join("weir.h");
    // The memcached switch's structs (bpf/kv/weir_kv.bpf.c).
    let kv_header = include.join("weir_kv.h");
    // Connection sync's event (bpf/lib/sync.h).
    let sync_header = include.join("weir_sync.h");
    // The backends' decapsulation program (bpf/weir_decap.bpf.c).
    let decap_header = include.join("weir_decap.h");
    // QUIC routing by connection ID (bpf/lib/quic.h).
    let quic_header = include.join("weir_quic.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed={}", quic_header.display());
    println!("cargo:rerun-if-changed={}", kv_header.display());
    println!("cargo:rerun-if-changed={}", sync_header.display());
    println!("cargo:rerun-if-changed={}", decap_header.display());
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .header(kv_header.to_string_lossy())
        .header(sync_header.to_string_lossy())
        .header(decap_header.to_string_lossy())
        .header(quic_header.to_string_lossy())
        .clang_arg(format!("-I/usr/include/{}-linux-gnu", env::consts::ARCH))
        .allowlist_type("weir_.*")
        .allowlist_var("WEIR_.*")
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .prepend_enum_name(false)
        .layout_tests(true)
        .generate()
        .expect("bindgen could not read bpf/include/weir.h or weir_kv.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("weir_abi.rs");
    bindings.write_to_file(out).expect("write bindings");
}
