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
//!
//! The path is a chain of borrowed links on the stack ([`Trail`]), turned into text only when
//! an error needs it: decoding a valid object allocates nothing for paths.

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

/// Where a value is: the root, or a field or item of the value one link up.
#[derive(Clone, Copy, Debug)]
enum Trail<'de, 'p> {
    Root,
    Field(&'p Trail<'de, 'p>, &'de str),
    Item(&'p Trail<'de, 'p>, usize),
}

impl Trail<'_, '_> {
    /// The path as text (only on an error).
    fn path(&self) -> Path {
        match self {
            Trail::Root => Path::new(""),
            Trail::Field(up, name) => up.path().child(name),
            Trail::Item(up, i) => up.path().index(*i),
        }
    }
}

/// Deserializes the value at `trail`.
pub(crate) struct De<'de, 'p> {
    value: &'de Value,
    trail: Trail<'de, 'p>,
}

impl<'de> De<'de, 'de> {
    /// A deserializer of the whole `value`.
    pub(crate) fn root(value: &'de Value) -> Self {
        De {
            value,
            trail: Trail::Root,
        }
    }
}

/// Gives an error without a path the path of the value being decoded.
fn at<T>(trail: Trail<'_, '_>, result: Result<T, Error>) -> Result<T, Error> {
    result.map_err(|mut e| {
        if e.path.is_none() {
            e.path = Some(trail.path());
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

impl<'de> de::Deserializer<'de> for De<'de, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let trail = self.trail;
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
                trail: &trail,
            }),
            Value::Object(map) => visitor.visit_map(Entries::new(map, &trail, false)),
        };
        at(trail, result)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let trail = self.trail;
        let result = match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        };
        at(trail, result)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let trail = self.trail;
        let result = match self.value {
            Value::Object(map) => visitor.visit_map(Entries::new(map, &trail, true)),
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        };
        at(trail, result)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let trail = self.trail;
        at(trail, visitor.visit_newtype_struct(self))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let trail = self.trail;
        let result = match self.value {
            Value::String(s) => visitor.visit_enum(BorrowedStrDeserializer::new(s)),
            Value::Object(map) if map.len() == 1 => match map.iter().next() {
                Some((variant, value)) => visitor.visit_enum(Variant {
                    variant,
                    value,
                    trail: Trail::Field(&trail, variant),
                }),
                None => Err(de::Error::invalid_type(Unexpected::Map, &visitor)),
            },
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        };
        at(trail, result)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier
    }
}

/// The items of a JSON array, each at `trail[i]`.
struct Items<'de, 'p> {
    items: std::iter::Enumerate<std::slice::Iter<'de, Value>>,
    trail: &'p Trail<'de, 'p>,
}

impl<'de> SeqAccess<'de> for Items<'de, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.items.next() {
            Some((i, v)) => seed
                .deserialize(De {
                    value: v,
                    trail: Trail::Item(self.trail, i),
                })
                .map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The entries of a JSON object, each at `trail.key`; a struct's null fields are skipped.
struct Entries<'de, 'p> {
    entries: serde_json::map::Iter<'de>,
    trail: &'p Trail<'de, 'p>,
    skip_nulls: bool,
    pending: Option<(&'de String, &'de Value)>,
}

impl<'de, 'p> Entries<'de, 'p> {
    fn new(map: &'de Map<String, Value>, trail: &'p Trail<'de, 'p>, skip_nulls: bool) -> Self {
        Entries {
            entries: map.iter(),
            trail,
            skip_nulls,
            pending: None,
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'de, '_> {
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
                at(Trail::Field(self.trail, k), seed.deserialize(key)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.pending.take() {
            Some((k, v)) => seed.deserialize(De {
                value: v,
                trail: Trail::Field(self.trail, k),
            }),
            None => Err(de::Error::custom(
                "a map value was asked for before its key",
            )),
        }
    }
}

/// An externally tagged enum variant: `{"variant": value}`.
struct Variant<'de, 'p> {
    variant: &'de str,
    value: &'de Value,
    trail: Trail<'de, 'p>,
}

impl<'de, 'p> EnumAccess<'de> for Variant<'de, 'p> {
    type Error = Error;
    type Variant = De<'de, 'p>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, De<'de, 'p>), Error> {
        let tag: BorrowedStrDeserializer<'de, Error> = BorrowedStrDeserializer::new(self.variant);
        let v = seed.deserialize(tag)?;
        Ok((
            v,
            De {
                value: self.value,
                trail: self.trail,
            },
        ))
    }
}

impl<'de> VariantAccess<'de> for De<'de, '_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.value {
            Value::Null => Ok(()),
            other => at(
                self.trail,
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
