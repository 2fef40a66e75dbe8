//! The registry: the workflow kinds this process runs, each at one or more versions, as
//! type-erased functions from JSON input to JSON output. Registration keeps the input and
//! output types' ids, so a start from this process is type-checked before anything is
//! written; the erased function decodes its input with serde when a task runs it.

use std::any::{TypeId, type_name};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::WorkflowContext;
use crate::error::{Error, Result, WorkflowError};
use crate::names::{self, NameKind};

/// A running workflow's future: its output as JSON, or its error.
pub(crate) type WorkflowFuture =
    Pin<Box<dyn Future<Output = Result<serde_json::Value, WorkflowError>> + Send>>;

/// Decodes the input and calls the workflow; a decoding error means the stored input is not
/// the registered type's (a start from a process that could not check it).
type Start = Box<
    dyn Fn(
            WorkflowContext,
            serde_json::Value,
        ) -> std::result::Result<WorkflowFuture, serde_json::Error>
        + Send
        + Sync,
>;

fn wrong_type(
    kind: &str,
    what: &'static str,
    expected: &'static str,
    found: &'static str,
) -> Error {
    Error::WrongType {
        kind: kind.to_owned(),
        what,
        expected,
        found,
    }
}

/// One registered (kind, version).
pub(crate) struct Workflow {
    input: TypeId,
    input_type: &'static str,
    output: TypeId,
    output_type: &'static str,
    start: Start,
}

impl Workflow {
    /// Refuses a call whose input or output type is not the registered one.
    pub(crate) fn check_types<I: 'static, O: 'static>(&self, kind: &str) -> Result<()> {
        self.check_input_type::<I>(kind)?;
        if TypeId::of::<O>() != self.output {
            return Err(wrong_type(
                kind,
                "output",
                self.output_type,
                type_name::<O>(),
            ));
        }
        Ok(())
    }

    /// Refuses a start whose input type is not the registered one.
    pub(crate) fn check_input_type<I: 'static>(&self, kind: &str) -> Result<()> {
        if TypeId::of::<I>() != self.input {
            return Err(wrong_type(kind, "input", self.input_type, type_name::<I>()));
        }
        Ok(())
    }

    /// Decodes `input` (the stored input) and starts the workflow on it.
    pub(crate) fn start(
        &self,
        context: WorkflowContext,
        input: serde_json::Value,
    ) -> std::result::Result<WorkflowFuture, serde_json::Error> {
        (self.start)(context, input)
    }

    /// The registered input type's name.
    pub(crate) fn input_type(&self) -> &'static str {
        self.input_type
    }
}

/// The kinds and versions this process runs. Registration problems are collected, not
/// raised, so a builder can chain registrations and report every problem at once.
#[derive(Default)]
pub(crate) struct Registry {
    workflows: BTreeMap<(String, u32), Workflow>,
    problems: Vec<String>,
}

impl Registry {
    /// Registers `workflow` as `kind` at `version`. An invalid kind, version 0 or a pair
    /// registered twice is recorded as a problem, reported by [`Registry::checked`].
    pub(crate) fn register<I, O, F, Fut>(&mut self, kind: &str, version: u32, workflow: F)
    where
        I: Serialize + DeserializeOwned + Send + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
        F: Fn(WorkflowContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, WorkflowError>> + Send + 'static,
    {
        if let Err(error) = names::check(NameKind::Kind, kind) {
            self.problems.push(error.to_string());
            return;
        }
        if version == 0 {
            self.problems.push(format!(
                "workflow kind {kind:?}: versions start at 1, not 0"
            ));
            return;
        }
        if self.workflows.contains_key(&(kind.to_owned(), version)) {
            self.problems.push(format!(
                "workflow kind {kind:?} version {version} is registered twice"
            ));
            return;
        }
        let start: Start = Box::new(move |context, input| {
            let input: I = serde_json::from_value(input)?;
            let running = workflow(context, input);
            Ok(Box::pin(async move {
                let output = running.await?;
                serde_json::to_value(&output).map_err(|error| {
                    WorkflowError::new(format!("the output does not serialize as JSON: {error}"))
                })
            }))
        });
        let registered = Workflow {
            input: TypeId::of::<I>(),
            input_type: type_name::<I>(),
            output: TypeId::of::<O>(),
            output_type: type_name::<O>(),
            start,
        };
        self.workflows
            .insert((kind.to_owned(), version), registered);
    }

    /// The registry, or [`Error::InvalidConfig`] naming every registration problem.
    pub(crate) fn checked(self) -> Result<Self> {
        if self.problems.is_empty() {
            Ok(self)
        } else {
            Err(Error::InvalidConfig(self.problems.join("; ")))
        }
    }

    /// The highest registered version of `kind`, with its workflow.
    pub(crate) fn latest(&self, kind: &str) -> Option<(u32, &Workflow)> {
        self.workflows
            .range((kind.to_owned(), 0)..=(kind.to_owned(), u32::MAX))
            .next_back()
            .map(|((_, version), workflow)| (*version, workflow))
    }

    /// The workflow registered as `kind` at `version`.
    pub(crate) fn get(&self, kind: &str, version: u32) -> Option<&Workflow> {
        self.workflows.get(&(kind.to_owned(), version))
    }

    /// Every registered (kind, version), in order.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = (&str, u32)> {
        self.workflows
            .keys()
            .map(|(kind, version)| (kind.as_str(), *version))
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kinds()).finish()
    }
}
