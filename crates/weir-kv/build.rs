//! Compiles the memcached switch `bpf/kv/weir_kv.bpf.c` with clang and
//! generates its libbpf-rs skeleton, as weir-dataplane's build.rs does for
//! weir_lb. Warnings are errors.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let bpf = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
    let src = bpf.join("kv/weir_kv.bpf.c");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    // The switch includes weir_lb's shared headers (bpf/include, bpf/lib) too.
    println!("cargo:rerun-if-changed={}", bpf.join("kv").display());
    println!("cargo:rerun-if-changed={}", bpf.join("include").display());
    println!("cargo:rerun-if-changed={}", bpf.join("lib").display());
    SkeletonBuilder::new()
        .source(&src)
        .obj(out.join("weir_kv.bpf.o"))
        .clang_args([
            "-Wall".to_string(),
            "-Wextra".to_string(),
            "-Werror".to_string(),
            "-Wno-unused-parameter".to_string(),
            format!("-I{}", bpf.join("include").display()),
            format!("-I{}", bpf.display()),
            format!("-I/usr/include/{}-linux-gnu", env::consts::ARCH),
        ])
        .build_and_generate(out.join("weir_kv.skel.rs"))
        .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
}
