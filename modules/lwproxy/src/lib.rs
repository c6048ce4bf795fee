//! lwproxy (in progress).
