//! `ctxhost serve`: the HTTP daemon (in progress).
