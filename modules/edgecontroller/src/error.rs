//! edgecontroller errors.

/// What went wrong starting edgecontroller.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// An entry of `customResources` is not `group/version/plural/Kind`.
    #[error("modules.edgeController.customResources: {0:?} is not group/version/plural/Kind")]
    BadCustomResource(String),
}
