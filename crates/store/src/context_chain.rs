//! One declaration of anyhow-style context for the workspace's error enums. `context_chain!(MyError)`
//! in a crate's error module declares a `Context` trait there: `.context(..)` and `.with_context(|| ..)`
//! on any result whose error converts into `MyError` (wrapped as `MyError::Context { context, cause }`,
//! displayed `context: cause` on one line) and on options (a missing value is `MyError::Invalid`, the
//! context its whole message), with `root()` (the cause under every context, what to match on) and
//! `contexts()` (outermost first). The enum must have those two variants. `bail_and_ensure!` declares
//! the crate's `bail!` and `ensure!` beside it.

/// Declares `Context` for `$error` in the invoking module (see the module documentation).
#[macro_export]
macro_rules! context_chain {
    ($error:ident) => {
        impl $error {
            /// The cause under every `Context`: what to match on.
            pub fn root(&self) -> &$error {
                match self {
                    $error::Context { cause, .. } => cause.root(),
                    other => other,
                }
            }

            /// The contexts from the outermost in, without the cause.
            pub fn contexts(&self) -> Vec<&str> {
                let mut out = Vec::new();
                let mut at = self;
                while let $error::Context { context, cause } = at {
                    out.push(context.as_str());
                    at = cause;
                }
                out
            }
        }

        /// `.context(..)` / `.with_context(|| ..)` on results and options, as anyhow's.
        pub trait Context<T> {
            fn context<C: std::fmt::Display>(self, context: C) -> std::result::Result<T, $error>;
            fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(
                self,
                context: F,
            ) -> std::result::Result<T, $error>;
        }

        impl<T, E: Into<$error>> Context<T> for std::result::Result<T, E> {
            fn context<C: std::fmt::Display>(self, context: C) -> std::result::Result<T, $error> {
                self.with_context(|| context)
            }

            fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(
                self,
                context: F,
            ) -> std::result::Result<T, $error> {
                self.map_err(|e| $error::Context {
                    context: context().to_string(),
                    cause: Box::new(e.into()),
                })
            }
        }

        /// A missing value is an invalid input; the context is the whole message.
        impl<T> Context<T> for Option<T> {
            fn context<C: std::fmt::Display>(self, context: C) -> std::result::Result<T, $error> {
                self.with_context(|| context)
            }

            fn with_context<C: std::fmt::Display, F: FnOnce() -> C>(
                self,
                context: F,
            ) -> std::result::Result<T, $error> {
                self.ok_or_else(|| $error::Invalid(context().to_string()))
            }
        }
    };
}

/// `bail!` and `ensure!` for the error enum at `$error` (`crate::error::LabError`), declared where
/// this is invoked (a crate's error module, which then exports them with `pub(crate) use {bail,
/// ensure};`): `bail!(..)` returns the enum's `Invalid` with a formatted message, `ensure!(c, ..)`
/// unless `c` holds. The leading `$` is passed in because a macro cannot write its own for the
/// macros it declares (`bail_and_ensure!($ crate::error::LabError)`).
#[macro_export]
macro_rules! bail_and_ensure {
    ($d:tt $($error:tt)::+) => {
        /// Returns the error's `Invalid` with a formatted message.
        macro_rules! bail {
            ($d($d message:tt)+) => {
                return Err($($error)::+::Invalid(format!($d($d message)+)))
            };
        }

        /// Returns the error's `Invalid` with a formatted message unless the condition holds.
        macro_rules! ensure {
            ($d condition:expr, $d($d message:tt)+) => {{
                // Bound first: `!(x >= y)` on floats reads as `x < y` and is not (NaN).
                let holds: bool = $d condition;
                if !holds {
                    return Err($($error)::+::Invalid(format!($d($d message)+)));
                }
            }};
        }
    };
}
