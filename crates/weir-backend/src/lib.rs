//! The tools that run on weir's backends, not on the balancer:
//! [`agent`] (`weir agent`) reports a backend's load to the controller, and
//! [`decap`] (`weir decap`) strips weir's IPIP and GUE encapsulation in XDP
//! where the kernel has no ipip/fou modules.

pub mod agent;
pub mod decap;
