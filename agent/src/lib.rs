//! Flotilla member agent.
