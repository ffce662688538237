//! Model calls shared by the chat agent and the diagnostic graph: the chat-model seam
//! (`model`) and one generation polled on a run worker's thread (`call`).

pub mod call;
pub mod model;
