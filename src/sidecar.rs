//! LibreFang's sidecar context-engine protocol over stdio (in progress).
