//! A table's name, as configuration gives it: checked once to be an SQL identifier, then written
//! into statements.

use std::sync::Arc;

/// A validated table name: `name` or `schema.name`, each an SQL identifier (ASCII letters,
/// digits and `_`, not starting with a digit, at most 50 characters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    qualified: Arc<str>,
    schema: Option<Arc<str>>,
    name: Arc<str>,
}

impl Table {
    /// `table` if it is `name` or `schema.name`, each an SQL identifier.
    pub fn parse(table: &str) -> Option<Table> {
        let ident = |s: &str| {
            let mut chars = s.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && s.len() <= 50
        };
        let (schema, name) = match table.split_once('.') {
            Some((schema, name)) if ident(schema) && ident(name) => (Some(schema.into()), name),
            None if ident(table) => (None, table),
            _ => return None,
        };
        Some(Table {
            qualified: table.into(),
            schema,
            name: name.into(),
        })
    }

    /// As written in statements: `name` or `schema.name`.
    pub fn qualified(&self) -> &str {
        &self.qualified
    }

    /// The schema (PostgreSQL) or attached database (SQLite), if named.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The unqualified name: index and trigger names start with it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `item` (an index's name) in the table's schema: `schema.item`, or `item`.
    pub fn in_schema(&self, item: &str) -> String {
        match &self.schema {
            Some(schema) => format!("{schema}.{item}"),
            None => item.to_owned(),
        }
    }

    /// A migration file with its placeholders replaced: `{table}` (qualified), `{name}` and
    /// `{channel}` (the qualified name, PostgreSQL's `NOTIFY` channel).
    pub fn render(&self, sql: &str) -> String {
        sql.replace("{table}", &self.qualified)
            .replace("{name}", &self.name)
            .replace("{channel}", &self.qualified)
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn table_names_are_identifiers() {
        let t = Table::parse("app.inbox_2").unwrap();
        assert_eq!(
            (t.qualified(), t.schema(), t.name()),
            ("app.inbox_2", Some("app"), "inbox_2")
        );
        assert_eq!(t.in_schema("inbox_2_key"), "app.inbox_2_key");
        assert!(Table::parse("delivery_inbox").unwrap().schema().is_none());
        for bad in [
            "", "1x", "a b", "a;drop", "a.b.c", "a.", ".b", "x\"y", "\"x\"", ".x", "x.",
        ] {
            assert!(Table::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn render_fills_the_placeholders() {
        let t = Table::parse("app.outbox").unwrap();
        assert_eq!(
            t.render("{table} {name} '{channel}'"),
            "app.outbox outbox 'app.outbox'"
        );
    }
}
