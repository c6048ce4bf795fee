//! edgecontroller (in progress).
