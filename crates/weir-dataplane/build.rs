//! Compiles every `bpf/*.bpf.c` with clang and generates its libbpf-rs
//! skeleton (libbpf-bootstrap style). Warnings are errors.
use std::{env, path::PathBuf};

use libbpf_cargo::SkeletonBuilder;

// The lab's programs (generator, sink, floor) are built by lab/weir-traffic,
// the memcached switch (bpf/kv) by weir-kv.
const PROGRAMS: &[&str] = &["weir_lb", "weir_decap"];

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let arch_include = format!("-I/usr/include/{}-linux-gnu", env::consts::ARCH);
    println!("cargo:rerun-if-changed={}", root.display());
    for name in PROGRAMS {
        let src = root.join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args([
                "-Wall".to_string(),
                "-Wextra".to_string(),
                "-Werror".to_string(),
                "-Wno-unused-parameter".to_string(),
                format!("-I{}", root.join("include").display()),
                format!("-I{}", root.display()),
                arch_include.clone(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    }
}
