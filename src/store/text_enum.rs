//! Closed enums stored as lowercase TEXT. One macro gives each enum its `as_str`, `Display`,
//! `FromStr` and rusqlite conversions, so a value the code does not know reads back as an
//! error instead of a silent default. The schema's CHECK constraints list the same words.

/// Implements text conversions for a fieldless `Copy` enum: `text_enum!(Role, "role",
/// { Admin => "admin", Viewer => "viewer" })`. The label names the kind in error messages.
macro_rules! text_enum {
    ($name:ident, $label:literal, { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The word stored in the database and used on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::store::StoreError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                match text {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::store::StoreError::Invalid(format!(
                        "unknown {} `{other}` (expected one of: {})",
                        $label,
                        [$($text),+].join(", ")
                    ))),
                }
            }
        }

        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.as_str()))
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(
                value: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                value
                    .as_str()?
                    .parse()
                    .map_err(rusqlite::types::FromSqlError::other)
            }
        }
    };
}

pub(crate) use text_enum;

#[cfg(test)]
mod tests {
    use crate::store::StoreError;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Colour {
        Red,
        Blue,
    }

    text_enum!(Colour, "colour", { Red => "red", Blue => "blue" });

    #[test]
    fn round_trips_text_and_rejects_unknown_words() {
        for colour in Colour::ALL {
            assert_eq!(colour.as_str().parse::<Colour>().unwrap(), *colour);
        }
        assert_eq!(Colour::Blue.to_string(), "blue");
        let err = "green".parse::<Colour>().unwrap_err();
        assert!(matches!(err, StoreError::Invalid(ref m) if m.contains("red, blue")));

        let connection = rusqlite::Connection::open_in_memory().unwrap();
        let back: Colour = connection
            .query_row("SELECT ?1", [Colour::Red], |r| r.get(0))
            .unwrap();
        assert_eq!(back, Colour::Red);
        let unknown = connection.query_row("SELECT 'green'", [], |r| r.get::<_, Colour>(0));
        assert!(unknown.is_err());
    }
}
