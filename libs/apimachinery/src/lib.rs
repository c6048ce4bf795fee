//! apimachinery: the Kubernetes API semantics both REST endpoints (the embedded control plane
//! and the edge's lwproxy) share, as pure functions with no I/O: which resources exist and how
//! they are named ([`catalog`]), label and field selectors ([`selector`]), the fields an object
//! is selected by ([`fields`]), the patch types ([`patch`]), field ownership and server-side
//! apply ([`managedfields`]), what a pod references ([`podrefs`]), `kubectl get` tables
//! ([`table`]), `Status` errors ([`status`]) and what a status write changes ([`statuswrite`]).
#![forbid(unsafe_code)]

pub mod alloc;
pub mod catalog;
pub mod configdata;
pub mod convert;
pub mod crdschema;
pub mod defaults;
pub mod fields;
pub mod forward;
pub mod managedfields;
pub mod noderules;
pub mod object;
pub mod patch;
pub mod podrefs;
pub mod quantity;
pub mod rbac;
pub mod scale;
pub mod selector;
pub mod sites;
pub mod status;
pub mod statuswrite;
pub mod subscribe;
pub mod table;
pub mod time;
pub mod validation;

pub use catalog::{Column, ResourceInfo};
pub use forward::{ForwardedReply, ForwardedWrite};
pub use patch::{PatchError, PatchType};
pub use selector::{FieldSelector, LabelSelector, SelectorError};
pub use status::ApiError;
pub use table::IncludeObject;
