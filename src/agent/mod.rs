//! The chat agent: what one chat turn does. Input safety, the intent router, the execution
//! policy compiled from the route, the tool registry and the run's catalog, direct reads,
//! pending actions for anything that changes state, and the bounded structured ReAct loop
//! with cited knowledge answers. Reaches models and search only through the traits in
//! `backends`, and runs only through the narrow `TurnSink` the run worker hands it; never
//! imports axum, rusqlite or candle.
