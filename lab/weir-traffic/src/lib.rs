//! weir-traffic: the labs' traffic, in BPF.
//!
//! - [`gen`]: the packet generator `weir_gen` (live BPF_PROG_TEST_RUN).
//! - [`sink`]: the XDP sink `weir_sink` that counts what arrives.
//! - [`minimal`]: the benchmark floor and the veth pass-through.
//! - [`xsk_redirect`]: every packet to the AF_XDP socket of its RX queue
//!   (weir-afxdp's tests and benchmarks).
//!
//! Their sources are under `lab/bpf/`; none of them is part of the load
//! balancer.

pub mod gen;
pub mod minimal;
pub mod sink;
pub mod xsk_redirect;

pub mod skel {
    //! Generated libbpf-rs skeletons of the programs under `lab/bpf/`.
    #![allow(clippy::all, missing_docs, unsafe_op_in_unsafe_fn)]
    pub mod minimal {
        include!(concat!(env!("OUT_DIR"), "/minimal.skel.rs"));
    }
    pub mod gen {
        include!(concat!(env!("OUT_DIR"), "/weir_gen.skel.rs"));
    }
    pub mod sink {
        include!(concat!(env!("OUT_DIR"), "/weir_sink.skel.rs"));
    }
}
