//! The one integration-test binary: real gateway processes, real loopback sockets, real peers.

mod support;

mod auth;
mod cli;
mod contracts;
mod faults;
mod front_legacy;
mod front_modern;
mod gating;
mod health;
mod interop;
mod policy;
mod ranking;
mod relays;
mod rest;
mod routing;
mod security;
mod subscriptions;
mod upstream_client;
mod upstream_transports;
mod validation;
