//! A runtime for durable workflows on the journal's SQLite file: registered workflow kinds,
//! messages sent to executions, and events they publish, kept in the runtime's own tables
//! beside the journal's (owner `runtime`, `schema/runtime/`).
//!
//! A [`Client`] is what any process holds to work with the runtime's executions without
//! running them: it sends messages (kept until a `recv` step of the receiver consumes them,
//! delivered once per idempotency key), reads published events, and awaits results through a
//! [`WorkflowHandle`], woken by a watcher that notices other processes' commits. Every bad input (a name
//! with a control character, an oversized message, a receiver that does not exist or has
//! ended) is a typed [`Error`] and leaves the journal unchanged. Time comes from a [`Clock`];
//! tests use [`testing::TestClock`] and move it instead of sleeping.
//!
//! ```
//! use durably_journal::{Journal, Opened};
//! use durably_runtime::{Client, Error};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let journal = Journal::open(dir.path().join("journal.db"))?;
//! let client = Client::new(journal.clone()).await?; // creates the runtime's tables
//!
//! // A message to an execution nobody started is refused, and nothing is written.
//! let nobody = durably_journal::new_execution_id();
//! let refused = client.send(nobody, "approval", &true, Some("click-1")).await;
//! assert!(matches!(refused, Err(Error::ReceiverNotFound { .. })));
//!
//! // So is a topic with a control character.
//! let refused = client.send(nobody, "approval\n", &true, None).await;
//! assert!(matches!(refused, Err(Error::InvalidName { what: "topic", .. })));
//!
//! // Any process can await an execution's result, here one a program drives by hand.
//! let id = durably_journal::new_execution_id();
//! let Opened::Running(execution) = journal.open_execution(id, "report", "", &()).await? else {
//!     unreachable!("a new execution is never finished");
//! };
//! let handle = client.handle::<String>(id);
//! let waiter = tokio::spawn(async move { handle.result().await });
//! execution.complete(&"done").await?;
//! assert_eq!(waiter.await??, "done");
//! assert_eq!(client.get_event::<String>(id, "status")?, None); // it published no events
//! # Ok(())
//! # }
//! ```

mod client;
mod clock;
mod error;
mod handle;
mod names;
mod store;
mod watcher;

pub use client::{Client, SendOutcome};
pub use clock::{Clock, Sleep, SystemClock, testing};
pub use error::{Error, Result};
pub use handle::WorkflowHandle;
pub use names::KEY_BYTES_MAX;
