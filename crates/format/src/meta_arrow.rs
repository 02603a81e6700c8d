//! A metadata value in Arrow: the five value columns (`v_str`, `v_i64`,
//! `v_f64`, `v_bool`, `v_bytes`) of which exactly one is set per row, the one
//! `value_type` names. The container's meta section and the store's Iceberg
//! `meta` table both lay values out this way, through this one encoder and
//! decoder; they differ only in the bytes column's offset width (`O`: `i32`
//! in the section, `i64` for Iceberg's `binary`).

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, GenericBinaryBuilder, Int64Builder, StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, GenericBinaryArray, Int64Array, OffsetSizeTrait,
    RecordBatch, StringArray,
};

use crate::error::{Error, Result};
use crate::meta::MetaValue;

/// Builds the five value columns, one value per row.
pub struct MetaValueBuilder<O: OffsetSizeTrait> {
    s: StringBuilder,
    i: Int64Builder,
    f: Float64Builder,
    b: BooleanBuilder,
    by: GenericBinaryBuilder<O>,
}

impl<O: OffsetSizeTrait> Default for MetaValueBuilder<O> {
    fn default() -> Self {
        MetaValueBuilder {
            s: StringBuilder::new(),
            i: Int64Builder::new(),
            f: Float64Builder::new(),
            b: BooleanBuilder::new(),
            by: GenericBinaryBuilder::new(),
        }
    }
}

impl<O: OffsetSizeTrait> MetaValueBuilder<O> {
    /// Appends `v` to its column and a null to the four others.
    pub fn append(&mut self, v: &MetaValue) {
        let code = v.type_code();
        match v {
            MetaValue::Str(x) => self.s.append_value(x),
            MetaValue::I64(x) => self.i.append_value(*x),
            MetaValue::F64(x) => self.f.append_value(*x),
            MetaValue::Bool(x) => self.b.append_value(*x),
            MetaValue::Bytes(x) => self.by.append_value(x),
        }
        if code != 0 {
            self.s.append_null();
        }
        if code != 1 {
            self.i.append_null();
        }
        if code != 2 {
            self.f.append_null();
        }
        if code != 3 {
            self.b.append_null();
        }
        if code != 4 {
            self.by.append_null();
        }
    }

    /// The five columns: `v_str`, `v_i64`, `v_f64`, `v_bool`, `v_bytes`.
    pub fn finish(mut self) -> [ArrayRef; 5] {
        [
            Arc::new(self.s.finish()),
            Arc::new(self.i.finish()),
            Arc::new(self.f.finish()),
            Arc::new(self.b.finish()),
            Arc::new(self.by.finish()),
        ]
    }
}

/// The five value columns of a decoded batch, found by name and type.
pub struct MetaValueColumns<'a, O: OffsetSizeTrait> {
    s: &'a StringArray,
    i: &'a Int64Array,
    f: &'a Float64Array,
    b: &'a BooleanArray,
    by: &'a GenericBinaryArray<O>,
    what: &'a str,
}

impl<'a, O: OffsetSizeTrait> MetaValueColumns<'a, O> {
    /// The value columns of `batch`; `what` names the batch in errors.
    pub fn of(batch: &'a RecordBatch, what: &'a str) -> Result<Self> {
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| Error::corrupt(format!("{what}: no column {name}")))
        };
        let mistyped =
            |name: &str| Error::corrupt(format!("{what}: column {name} has a wrong type"));
        Ok(MetaValueColumns {
            s: col("v_str")?
                .as_string_opt::<i32>()
                .ok_or_else(|| mistyped("v_str"))?,
            i: col("v_i64")?
                .as_primitive_opt::<Int64Type>()
                .ok_or_else(|| mistyped("v_i64"))?,
            f: col("v_f64")?
                .as_primitive_opt::<Float64Type>()
                .ok_or_else(|| mistyped("v_f64"))?,
            b: col("v_bool")?
                .as_boolean_opt()
                .ok_or_else(|| mistyped("v_bool"))?,
            by: col("v_bytes")?
                .as_binary_opt::<O>()
                .ok_or_else(|| mistyped("v_bytes"))?,
            what,
        })
    }

    /// Row `r`'s value, whose `value_type` is `code`: exactly the column
    /// `code` names must be set.
    pub fn value(&self, code: i64, r: usize) -> Result<MetaValue> {
        let valid = [
            self.s.is_valid(r),
            self.i.is_valid(r),
            self.f.is_valid(r),
            self.b.is_valid(r),
            self.by.is_valid(r),
        ];
        let slot = usize::try_from(code).ok().filter(|&c| c < valid.len());
        let Some(slot) = slot else {
            return Err(Error::corrupt(format!(
                "{}: row {r}: unknown value_type {code}",
                self.what
            )));
        };
        if valid.iter().filter(|v| **v).count() != 1 || !valid[slot] {
            return Err(Error::corrupt(format!(
                "{}: row {r}: value_type {code} but another value column is set",
                self.what
            )));
        }
        Ok(match slot {
            0 => MetaValue::Str(self.s.value(r).to_string()),
            1 => MetaValue::I64(self.i.value(r)),
            2 => MetaValue::F64(self.f.value(r)),
            3 => MetaValue::Bool(self.b.value(r)),
            _ => MetaValue::Bytes(self.by.value(r).to_vec()),
        })
    }
}
