//! The PostgreSQL change feed (see `changes.rs`): a thread with a session of its own that runs
//! `LISTEN` on channel `durably_<current_schema()>` (cut to 63 bytes, as `durably_notify()`
//! cuts it), which the schema's triggers notify at the commit of every write that can wake a
//! waiter. The counter moves on each notification, on a tick every `pg_poll` (a notification
//! lost with a dropped session delays a wake-up by one tick at most), and at every (re)connect,
//! since commits made while no session listened were not heard.
//!
//! The session runs on a current-thread tokio runtime of the thread's own: it only waits for
//! the socket and the tick, and shares nothing with the caller's runtime or the driver's.
//! The thread ends as soon as the journal and every subscriber have dropped their receivers.

use std::future::poll_fn;
use std::time::Duration;

use durably_db::{PgUrl, Target};
use tokio::sync::{mpsc, watch};
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};

use crate::changes::{bump, spawn as spawn_thread};
use crate::error::{Error, Result};

/// What a listening session yields: its asynchronous messages, then the error that ended it.
type Messages = mpsc::UnboundedReceiver<std::result::Result<AsyncMessage, tokio_postgres::Error>>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a connect waits for the server when the URL sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The session's `application_name`, as `pg_stat_activity` shows it.
const APPLICATION_NAME: &str = "durably:changes";

/// Starts the feed's thread for the journal at `url`, ticking every `poll`.
///
/// # Errors
/// [`Error::Io`] when the thread or its runtime cannot be started.
pub(crate) fn spawn(
    target: &Target,
    url: &PgUrl,
    poll: Duration,
    sender: watch::Sender<u64>,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            action: "start the change feed's runtime for",
            path: target.to_string().into(),
            source,
        })?;
    let url = url.clone();
    spawn_thread(target, move || runtime.block_on(listen(url, poll, sender)))
}

/// Listens until every receiver is dropped, connecting again after each lost session.
async fn listen(url: PgUrl, poll: Duration, sender: watch::Sender<u64>) {
    let poll = poll.max(Duration::from_millis(1));
    loop {
        match connect(&url).await {
            Ok((client, mut messages)) => {
                // Commits made while no session listened were not heard.
                bump(&sender);
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
                loop {
                    tokio::select! {
                        () = sender.closed() => return,
                        message = messages.recv() => match message {
                            Some(Ok(AsyncMessage::Notification(_))) => bump(&sender),
                            // A notice: nothing changed.
                            Some(Ok(_)) => {}
                            Some(Err(error)) => {
                                tracing::warn!(%error, "the change feed lost its PostgreSQL session");
                                break;
                            }
                            None => {
                                tracing::warn!("the change feed's PostgreSQL session ended");
                                break;
                            }
                        },
                        _ = tick.tick() => bump(&sender),
                    }
                }
                drop(client);
            }
            Err(error) => {
                tracing::warn!(%error, "the change feed cannot listen on PostgreSQL");
            }
        }
        // Waiters re-read through the journal meanwhile, which reports the condition to them.
        tokio::select! {
            () = sender.closed() => return,
            () = tokio::time::sleep(poll) => bump(&sender),
        }
    }
}

/// A session listening on the schema's channel, and the stream of its asynchronous messages
/// (notifications, notices, then the error that ended it).
async fn connect(url: &PgUrl) -> std::result::Result<(Client, Messages), BoxError> {
    let mut config: Config = url.expose().parse()?;
    config.application_name(APPLICATION_NAME);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    let (client, mut connection) = config.connect(NoTls).await?;
    let (forward, messages) = mpsc::unbounded_channel();
    // Polling the connection drives the session and yields its asynchronous messages; the
    // task ends with the session (the client dropped, or the socket lost).
    tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            if forward.send(message).is_err() {
                break;
            }
        }
    });
    let channel: Option<String> = client
        .query_one("SELECT left('durably_' || current_schema(), 63)", &[])
        .await?
        .try_get(0)?;
    let channel = channel.ok_or("the search path names no schema that exists")?;
    client
        .batch_execute(&format!("LISTEN {}", quote_identifier(&channel)))
        .await?;
    Ok((client, messages))
}

/// `name` as a quoted SQL identifier.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    //! The channel name is quoted as an identifier, whatever the schema is called.

    use super::quote_identifier;

    #[test]
    fn a_channel_name_is_quoted_with_its_quotes_doubled() {
        assert_eq!(quote_identifier("durably_t_1"), "\"durably_t_1\"");
        assert_eq!(quote_identifier("durably_a\"b"), "\"durably_a\"\"b\"");
    }
}
