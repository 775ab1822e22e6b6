//! A creation body as `transactions.payload` keeps it (migration 30).
//!
//! The body is kept exactly as received (the bytes every read route gives back), but since
//! migration 30 compressed: an LZ4 block with the body's length in front (`lz4_flex`'s
//! `compress_prepend_size`), stored as a BLOB. A row written before keeps its body as TEXT,
//! and reads as before: the column's type says which it is. A 2.8 KB body filled a 4 KB
//! page of `transactions` alone with its row; compressed, two or three rows share a page,
//! and a create writes a quarter fewer bytes to the WAL and, through the checkpoints, to the
//! database: 15.2 KB instead of 20.2 (docs/PERFORMANCE.md, "Bodies kept compressed").

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

/// The longest body a stored length may announce: far above any body the service takes (the
/// API's limit is 1 MiB), so that a damaged length is refused rather than allocated.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// A creation body compressed for `transactions.payload`; made on the request's thread, so
/// that the writer only binds it.
#[derive(Debug)]
pub(super) struct Compressed(Vec<u8>);

impl Compressed {
    pub(super) fn new(body: &str) -> Compressed {
        Compressed(lz4_flex::block::compress_prepend_size(body.as_bytes()))
    }
}

impl ToSql for Compressed {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(&self.0)))
    }
}

/// `transactions.payload` read back: the body exactly as it was received.
#[derive(Debug)]
pub(super) struct StoredBody(pub(super) String);

impl FromSql for StoredBody {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            // Written before migration 30: read as any text column is.
            ValueRef::Text(_) => String::column_result(value).map(StoredBody),
            ValueRef::Blob(blob) => decompress(blob)
                .map(StoredBody)
                .map_err(|error| FromSqlError::Other(error.into())),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

fn decompress(blob: &[u8]) -> Result<String, String> {
    let (length, _) = lz4_flex::block::uncompressed_size(blob).map_err(|e| e.to_string())?;
    if length > MAX_BODY_BYTES {
        return Err(format!(
            "a stored body announces {length} bytes, more than {MAX_BODY_BYTES}"
        ));
    }
    let bytes = lz4_flex::block::decompress_size_prepended(blob).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn read_back(conn: &Connection) -> rusqlite::Result<String> {
        conn.query_row("SELECT payload FROM t", [], |r| r.get::<_, StoredBody>(0))
            .map(|body| body.0)
    }

    #[test]
    fn a_body_reads_back_byte_for_byte_and_smaller_than_it_came() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (payload TEXT NOT NULL)")
            .unwrap();
        let body = format!(
            r#"{{"title":"Trip to Zürich ✈","note":"{}","items":[]}}"#,
            "Internal note for the travel desk. ".repeat(40)
        );
        let compressed = Compressed::new(&body);
        conn.execute("INSERT INTO t VALUES (?1)", [&compressed])
            .unwrap();
        let (kind, stored): (String, i64) = conn
            .query_row("SELECT typeof(payload), length(payload) FROM t", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(kind, "blob");
        assert!(stored * 4 < body.len() as i64, "{stored} of {}", body.len());
        assert_eq!(read_back(&conn).unwrap(), body);
    }

    #[test]
    fn a_body_stored_as_text_before_migration_30_reads_as_it_was() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            r#"CREATE TABLE t (payload TEXT NOT NULL);
               INSERT INTO t VALUES ('{"title":"old"}');"#,
        )
        .unwrap();
        assert_eq!(read_back(&conn).unwrap(), r#"{"title":"old"}"#);
    }

    #[test]
    fn a_damaged_body_is_an_error_never_a_guess() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (payload TEXT NOT NULL)")
            .unwrap();
        let mut huge = (u32::MAX).to_le_bytes().to_vec();
        huge.extend_from_slice(b"\x10x");
        conn.execute("INSERT INTO t VALUES (?1)", [&huge]).unwrap();
        let error = read_back(&conn).unwrap_err().to_string();
        assert!(error.contains("more than"), "{error}");

        conn.execute("UPDATE t SET payload = ?1", [&vec![9_u8, 0, 0, 0, 0xf0]])
            .unwrap();
        assert!(read_back(&conn).is_err());
        // Valid LZ4 of bytes that are not UTF-8.
        let latin1 = lz4_flex::block::compress_prepend_size(b"caf\xe9");
        conn.execute("UPDATE t SET payload = ?1", [&latin1])
            .unwrap();
        assert!(read_back(&conn).is_err());
    }
}
