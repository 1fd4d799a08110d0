//! A serde `Deserializer` over a borrowed JSON [`Value`] that decodes the way the Kubernetes API
//! server does, and remembers where it was when decoding failed:
//!
//! - a struct must be a JSON object (serde_json would also take an array, field by field, so
//!   `"status": [1]` decoded as a binding status whose first field is 1);
//! - a `null` struct field means the field is absent (Go's decoder leaves it unset);
//! - a `null` anywhere else — a map value such as `matchLabels: {"a": null}`, a list item — is
//!   given to the target type as it is, so a typed map of strings rejects it while raw JSON
//!   (manifests, member status) keeps it;
//! - every error carries the path of the value at fault (`spec.placement.clusterTolerations[0]`).

use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, Unexpected, VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::{Map, Value};

use crate::validation::Path;

/// A decoding error and the path of the value it is about (set by the innermost value).
#[derive(Debug)]
pub(crate) struct Error {
    pub(crate) path: Option<Path>,
    pub(crate) message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error {
            path: None,
            message: msg.to_string(),
        }
    }
}

/// Deserializes the value at `path`.
pub(crate) struct De<'a> {
    value: &'a Value,
    path: Path,
}

impl<'a> De<'a> {
    /// A deserializer of `value`, found at `path`.
    pub(crate) fn new(value: &'a Value, path: Path) -> Self {
        De { value, path }
    }
}

/// Gives an error without a path the path of the value being decoded.
fn at<T>(path: Path, result: Result<T, Error>) -> Result<T, Error> {
    result.map_err(|mut e| {
        if e.path.is_none() {
            e.path = Some(path);
        }
        e
    })
}

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Other("null"),
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Unexpected::Unsigned(u)
            } else if let Some(i) = n.as_i64() {
                Unexpected::Signed(i)
            } else {
                Unexpected::Float(n.as_f64().unwrap_or_default())
            }
        }
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

impl<'de> de::Deserializer<'de> for De<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let path = self.path.clone();
        let result = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or_default())
                }
            }
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Items {
                items: items.iter().enumerate(),
                path: self.path,
            }),
            Value::Object(map) => visitor.visit_map(Entries::new(map, self.path, false)),
        };
        at(path, result)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let path = self.path.clone();
        let result = match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        };
        at(path, result)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = self.path.clone();
        let result = match self.value {
            Value::Object(map) => visitor.visit_map(Entries::new(map, self.path, true)),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        };
        at(path, result)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = self.path.clone();
        at(path, visitor.visit_newtype_struct(self))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = self.path.clone();
        let result = match self.value {
            Value::String(s) => visitor.visit_enum(BorrowedStrDeserializer::new(s)),
            Value::Object(map) if map.len() == 1 => match map.iter().next() {
                Some((variant, value)) => visitor.visit_enum(Variant {
                    variant,
                    value,
                    path: self.path.child(variant),
                }),
                None => Err(de::Error::invalid_type(Unexpected::Map, &visitor)),
            },
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        };
        at(path, result)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier
    }
}

/// The items of a JSON array, each at `path[i]`.
struct Items<'a> {
    items: std::iter::Enumerate<std::slice::Iter<'a, Value>>,
    path: Path,
}

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.items.next() {
            Some((i, v)) => seed.deserialize(De::new(v, self.path.index(i))).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The entries of a JSON object, each at `path.key`; a struct's null fields are skipped.
struct Entries<'a> {
    entries: serde_json::map::Iter<'a>,
    path: Path,
    skip_nulls: bool,
    pending: Option<(&'a String, &'a Value)>,
}

impl<'a> Entries<'a> {
    fn new(map: &'a Map<String, Value>, path: Path, skip_nulls: bool) -> Self {
        Entries {
            entries: map.iter(),
            path,
            skip_nulls,
            pending: None,
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let next = if self.skip_nulls {
            self.entries.by_ref().find(|(_, v)| !v.is_null())
        } else {
            self.entries.next()
        };
        match next {
            Some((k, v)) => {
                self.pending = Some((k, v));
                let key: BorrowedStrDeserializer<'de, Error> = BorrowedStrDeserializer::new(k);
                at(self.path.child(k), seed.deserialize(key)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.pending.take() {
            Some((k, v)) => seed.deserialize(De::new(v, self.path.child(k))),
            None => Err(de::Error::custom(
                "a map value was asked for before its key",
            )),
        }
    }
}

/// An externally tagged enum variant: `{"variant": value}`.
struct Variant<'a> {
    variant: &'a str,
    value: &'a Value,
    path: Path,
}

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = Error;
    type Variant = De<'de>;

    fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, De<'de>), Error> {
        let tag: BorrowedStrDeserializer<'de, Error> = BorrowedStrDeserializer::new(self.variant);
        let v = seed.deserialize(tag)?;
        Ok((v, De::new(self.value, self.path)))
    }
}

impl<'de> VariantAccess<'de> for De<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.value {
            Value::Null => Ok(()),
            other => at(
                self.path,
                Err(de::Error::invalid_type(unexpected(other), &"unit variant")),
            ),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_struct(self, "", fields, visitor)
    }
}
