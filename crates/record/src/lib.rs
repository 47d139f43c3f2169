//! The recorder (Linux): runs a program and records it into the trace format.
