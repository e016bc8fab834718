//! Plugin templates for every runtime (in progress).
