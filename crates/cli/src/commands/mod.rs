//! One file per subcommand. Each `run` opens what it needs, does its work, and prints a table
//! or JSON.

pub mod cancel;
pub mod copy;
pub mod fire_id;
pub mod fires;
pub mod fork;
pub mod gc;
pub mod locks;
pub mod ls;
pub mod patches;
pub mod resolve;
pub mod resume;
pub mod schedules;
pub mod send;
pub mod show;
mod show_children;
mod show_runtime;
pub mod start;
pub mod sweep;
