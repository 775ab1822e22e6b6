//! Commands of the binary that run without a server or a database: the offline JSON Lines
//! tools (`quote`, `preview`) and the schema writer (`schemas`).

pub mod offline;
pub mod schemas;
