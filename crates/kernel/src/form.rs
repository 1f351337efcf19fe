//! Which form of the few-row products ([`crate::products`]) this process runs: the widest this CPU
//! has, or the one `SHARPDRAFT_KERNEL` names (`avx512`, `avx2`, `neon` or `libtorch`). Every command
//! checks the variable when it starts ([`check_requested`]): a form the CPU cannot run is an error
//! naming the variable, not a fallback that would change what a benchmark measures. (A library caller
//! that skips the check gets libtorch's products, and the reports' `kernel` fields say so.)

use std::cell::Cell;
use std::sync::OnceLock;

/// A form this CPU cannot run, or a value that names none; says which forms it runs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{VARIABLE}: {reason}")]
pub struct FormError {
    pub reason: String,
}

pub type Result<T> = std::result::Result<T, FormError>;

/// The variable that forces a form.
pub const VARIABLE: &str = "SHARPDRAFT_KERNEL";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelForm {
    /// 16 f32 lanes, 32 registers; bf16 pair products where the CPU has AVX512-BF16.
    Avx512,
    /// AVX2 with FMA: 8 f32 lanes, 16 registers (most laptops, AMD Zen 2 and 3).
    Avx2,
    /// ARM's Advanced SIMD: 4 f32 lanes, 32 registers (Apple silicon, Graviton, Ampere).
    Neon,
    /// No kernel: every product through libtorch.
    Libtorch,
}

impl KernelForm {
    /// Widest first.
    pub const ALL: [KernelForm; 4] = [Self::Avx512, Self::Avx2, Self::Neon, Self::Libtorch];

    /// The name `SHARPDRAFT_KERNEL`, `bench rows` and `generate --json` use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512 => "avx512",
            Self::Avx2 => "avx2",
            Self::Neon => "neon",
            Self::Libtorch => "libtorch",
        }
    }

    /// Whether this CPU runs the form.
    pub fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "aarch64")]
            Self::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            Self::Libtorch => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The widest form this CPU runs.
    pub fn best() -> Self {
        Self::ALL
            .into_iter()
            .find(|f| f.available())
            .unwrap_or(Self::Libtorch)
    }
}

/// The form `value` (of [`VARIABLE`]) names, if this CPU runs it.
pub fn parse(value: &str) -> Result<KernelForm> {
    let names: Vec<&str> = KernelForm::ALL
        .iter()
        .filter(|f| f.available())
        .map(|f| f.name())
        .collect();
    let refuse = |reason: String| FormError {
        reason: format!("{reason}; this CPU runs {}", names.join(", ")),
    };
    let form = KernelForm::ALL
        .into_iter()
        .find(|f| f.name() == value)
        .ok_or_else(|| {
            refuse(format!(
                "{value:?} is not a kernel form (avx512, avx2, neon, libtorch)"
            ))
        })?;
    if !form.available() {
        return Err(refuse(format!("{value}: this CPU does not have it")));
    }
    Ok(form)
}

/// The form [`VARIABLE`] asks for, the best one when it is unset; an error when it names a form
/// this CPU cannot run. Commands call it first, so a wrong value stops them before any work.
pub fn check_requested() -> Result<KernelForm> {
    match std::env::var(VARIABLE) {
        Ok(value) if !value.is_empty() => parse(&value),
        _ => Ok(KernelForm::best()),
    }
}

thread_local! {
    /// Inside [`with_form`]: the form this thread's products take.
    static FORCED: Cell<Option<KernelForm>> = const { Cell::new(None) };
}

/// The form this thread's few-row products take now.
pub fn current() -> KernelForm {
    static PROCESS: OnceLock<KernelForm> = OnceLock::new();
    FORCED.with(Cell::get).unwrap_or_else(|| {
        // A value the command did not check (a library user's) falls back to libtorch: products
        // still right, only slower, and the report's `kernel` field says so.
        *PROCESS.get_or_init(|| check_requested().unwrap_or(KernelForm::Libtorch))
    })
}

/// Runs `pass` with this thread's products in `form` (tests of each form on one CPU); an error
/// when the CPU cannot run it.
pub fn with_form<T>(form: KernelForm, pass: impl FnOnce() -> T) -> Result<T> {
    if !form.available() {
        return Err(FormError {
            reason: format!("{}: this CPU does not have it", form.name()),
        });
    }
    struct Restore(Option<KernelForm>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FORCED.with(|f| f.set(self.0));
        }
    }
    let _restore = Restore(FORCED.with(|f| f.replace(Some(form))));
    Ok(pass())
}
