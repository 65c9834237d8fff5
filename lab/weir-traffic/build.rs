//! Compiles the lab's BPF programs (`lab/bpf/*.bpf.c`) with clang and
//! generates their libbpf-rs skeletons. They include the product's headers
//! (`bpf/include`, `bpf/lib`) for the structs and parsers they share with
//! `weir_lb`. Warnings are errors.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["minimal", "weir_xsk_redirect", "weir_gen", "weir_sink"];

fn main() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lab_bpf = manifest.join("../bpf");
    let product_bpf = manifest.join("../../bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let arch_include = format!("-I/usr/include/{}-linux-gnu", env::consts::ARCH);
    println!("cargo:rerun-if-changed={}", lab_bpf.display());
    println!("cargo:rerun-if-changed={}", product_bpf.display());
    for name in PROGRAMS {
        let src = lab_bpf.join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args([
                "-Wall".to_string(),
                "-Wextra".to_string(),
                "-Werror".to_string(),
                "-Wno-unused-parameter".to_string(),
                format!("-I{}", lab_bpf.join("include").display()),
                format!("-I{}", product_bpf.join("include").display()),
                format!("-I{}", product_bpf.display()),
                arch_include.clone(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    }
}
