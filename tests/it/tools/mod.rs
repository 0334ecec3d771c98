//! The tools tier: the built binary and OpenSSH's tools, no root, no
//! network (feature `tools`).

mod cli;
mod contrib;
mod docs;
mod house;
mod keygen;
mod known_hosts;
mod messages;
mod schemas;
mod vocabulary;
