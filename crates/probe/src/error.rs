//! The probe's one error type: a model or drafter failure, or input the probe cannot use (named).

pub type Result<T> = std::result::Result<T, ProbeError>;

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Model(#[from] sharpdraft_model::ModelError),
    #[error(transparent)]
    Draft(#[from] sharpdraft_draft::DraftError),
    #[error("probe: {0}")]
    Input(String),
}
