//! Which JSON keys a typed value knows. [`shape_of`] serializes a value through a serializer
//! that records, for every struct, each declared field — including those `skip_serializing_if`
//! left out — so admission can tell a user's unknown field from a known one that happens to be
//! empty, and strict field validation can name unknown fields. It never produces JSON.

use std::collections::BTreeMap;
use std::fmt;

use serde::ser::{self, Serialize};

/// The known structure of a serialized value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A scalar, or a field the struct skipped: nothing below it is checked.
    Leaf,
    /// A struct and its declared fields.
    Struct(BTreeMap<&'static str, Shape>),
    /// A map (including opaque JSON objects): every key is data.
    Map(BTreeMap<String, Shape>),
    /// A sequence, element by element.
    Seq(Vec<Shape>),
}

static LEAF: Shape = Shape::Leaf;

impl Shape {
    /// The shape under `key` (Leaf when unknown).
    pub(crate) fn child(&self, key: &str) -> &Shape {
        match self {
            Shape::Struct(fields) => fields.get(key).unwrap_or(&LEAF),
            Shape::Map(entries) => entries.get(key).unwrap_or(&LEAF),
            _ => &LEAF,
        }
    }

    /// The shape of element `i` (Leaf when unknown).
    pub(crate) fn element(&self, i: usize) -> &Shape {
        match self {
            Shape::Seq(items) => items.get(i).unwrap_or(&LEAF),
            _ => &LEAF,
        }
    }

    /// True when this is a struct that declares `key`.
    pub(crate) fn declares(&self, key: &str) -> bool {
        matches!(self, Shape::Struct(fields) if fields.contains_key(key))
    }
}

/// The shape of `value`'s serialization.
pub(crate) fn shape_of<T: Serialize + ?Sized>(value: &T) -> Shape {
    value.serialize(ShapeSerializer).unwrap_or(Shape::Leaf)
}

#[derive(Debug)]
pub(crate) struct ShapeError(String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

impl ser::Error for ShapeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ShapeError(msg.to_string())
    }
}

struct ShapeSerializer;

macro_rules! leaf {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(fn $method(self, _v: $ty) -> Result<Shape, ShapeError> {
            Ok(Shape::Leaf)
        })*
    };
}

impl ser::Serializer for ShapeSerializer {
    type Ok = Shape;
    type Error = ShapeError;
    type SerializeSeq = SeqShape;
    type SerializeTuple = SeqShape;
    type SerializeTupleStruct = SeqShape;
    type SerializeTupleVariant = SeqShape;
    type SerializeMap = MapShape;
    type SerializeStruct = StructShape;
    type SerializeStructVariant = StructShape;

    leaf!(
        serialize_bool: bool,
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_i128: i128,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
        serialize_u64: u64,
        serialize_u128: u128,
        serialize_f32: f32,
        serialize_f64: f64,
        serialize_char: char,
        serialize_str: &str,
        serialize_bytes: &[u8],
        serialize_unit_struct: &'static str,
    );

    fn serialize_none(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Leaf)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Shape, ShapeError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Leaf)
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
    ) -> Result<Shape, ShapeError> {
        Ok(Shape::Leaf)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Shape, ShapeError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<Shape, ShapeError> {
        Ok(Shape::Leaf)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<SeqShape, ShapeError> {
        Ok(SeqShape(Vec::with_capacity(len.unwrap_or(0))))
    }

    fn serialize_tuple(self, len: usize) -> Result<SeqShape, ShapeError> {
        Ok(SeqShape(Vec::with_capacity(len)))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<SeqShape, ShapeError> {
        Ok(SeqShape(Vec::with_capacity(len)))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        len: usize,
    ) -> Result<SeqShape, ShapeError> {
        Ok(SeqShape(Vec::with_capacity(len)))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<MapShape, ShapeError> {
        Ok(MapShape {
            entries: BTreeMap::new(),
            key: None,
        })
    }

    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<StructShape, ShapeError> {
        Ok(StructShape(BTreeMap::new()))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<StructShape, ShapeError> {
        Ok(StructShape(BTreeMap::new()))
    }
}

struct SeqShape(Vec<Shape>);

impl SeqShape {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ShapeError> {
        self.0.push(value.serialize(ShapeSerializer)?);
        Ok(())
    }
}

impl ser::SerializeSeq for SeqShape {
    type Ok = Shape;
    type Error = ShapeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ShapeError> {
        self.push(value)
    }
    fn end(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Seq(self.0))
    }
}

impl ser::SerializeTuple for SeqShape {
    type Ok = Shape;
    type Error = ShapeError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ShapeError> {
        self.push(value)
    }
    fn end(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Seq(self.0))
    }
}

impl ser::SerializeTupleStruct for SeqShape {
    type Ok = Shape;
    type Error = ShapeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ShapeError> {
        self.push(value)
    }
    fn end(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Seq(self.0))
    }
}

impl ser::SerializeTupleVariant for SeqShape {
    type Ok = Shape;
    type Error = ShapeError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ShapeError> {
        self.push(value)
    }
    fn end(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Seq(self.0))
    }
}

struct MapShape {
    entries: BTreeMap<String, Shape>,
    key: Option<String>,
}

impl ser::SerializeMap for MapShape {
    type Ok = Shape;
    type Error = ShapeError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), ShapeError> {
        let key = key
            .serialize(serde_json::value::Serializer)
            .map_err(|e| ShapeError(e.to_string()))?;
        self.key = Some(match key {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        });
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ShapeError> {
        let key = self.key.take().unwrap_or_default();
        self.entries.insert(key, value.serialize(ShapeSerializer)?);
        Ok(())
    }
    fn end(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Map(self.entries))
    }
}

struct StructShape(BTreeMap<&'static str, Shape>);

impl StructShape {
    fn field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), ShapeError> {
        self.0.insert(key, value.serialize(ShapeSerializer)?);
        Ok(())
    }
}

impl ser::SerializeStruct for StructShape {
    type Ok = Shape;
    type Error = ShapeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), ShapeError> {
        self.field(key, value)
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), ShapeError> {
        self.0.insert(key, Shape::Leaf);
        Ok(())
    }
    fn end(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Struct(self.0))
    }
}

impl ser::SerializeStructVariant for StructShape {
    type Ok = Shape;
    type Error = ShapeError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), ShapeError> {
        self.field(key, value)
    }
    fn skip_field(&mut self, key: &'static str) -> Result<(), ShapeError> {
        self.0.insert(key, Shape::Leaf);
        Ok(())
    }
    fn end(self) -> Result<Shape, ShapeError> {
        Ok(Shape::Struct(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PropagationSpec, SpreadConstraint};

    #[test]
    fn skipped_fields_are_still_known() {
        let shape = shape_of(&SpreadConstraint::default());
        for key in ["spreadByField", "spreadByLabel", "maxGroups", "minGroups"] {
            assert!(shape.declares(key), "{key}");
        }
        assert!(!shape.declares("maxgroups"));
        let spec = shape_of(&PropagationSpec::default());
        assert!(spec.declares("failover"));
        assert!(spec.declares("placement"));
        assert_eq!(spec.child("failover"), &Shape::Leaf);
    }

    #[test]
    fn maps_and_sequences() {
        let v = serde_json::json!({"a": [1, {"b": 2}]});
        let shape = shape_of(&v);
        let Shape::Map(m) = &shape else {
            panic!("{shape:?}")
        };
        assert!(m.contains_key("a"));
        assert!(matches!(shape.child("a").element(1), Shape::Map(_)));
        assert!(!shape.declares("a"));
    }
}
