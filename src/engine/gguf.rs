//! Opening GGUF files safely: header parsed by candle's hardened reader, then every tensor
//! checked against the file's real size before anything is allocated, so a truncated or
//! hostile file becomes a clear error naming the file, never a panic or a huge allocation.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::QTensor;
use candle_core::Device;

use super::error::{EngineError, Result};

/// Tensors with more dimensions than this are rejected.
const MAX_TENSOR_DIMS: usize = 4;

/// An opened, validated GGUF file.
pub struct GgufFile {
    path: PathBuf,
    reader: BufReader<File>,
    content: Content,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let bad = |reason: String| EngineError::BadModelFile {
            path: path.to_path_buf(),
            reason,
        };
        let file = File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
        let mut reader = BufReader::new(file);
        let content =
            Content::read(&mut reader).map_err(|e| bad(format!("not a valid GGUF file: {e}")))?;
        let file_size = reader
            .seek(SeekFrom::End(0))
            .map_err(|e| bad(e.to_string()))?;
        validate_tensors(&content, file_size).map_err(bad)?;
        Ok(Self {
            path: path.to_path_buf(),
            reader,
            content,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and consumes the parts candle's model constructors need.
    pub fn into_parts(self) -> (Content, BufReader<File>) {
        (self.content, self.reader)
    }

    pub fn architecture(&self) -> Result<String> {
        self.string("general.architecture")
    }

    pub fn string(&self, key: &str) -> Result<String> {
        match self.content.metadata.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(self.bad(format!("metadata `{key}` is not a string"))),
            None => Err(self.bad(format!("metadata `{key}` is missing"))),
        }
    }

    pub fn optional_string(&self, key: &str) -> Option<String> {
        match self.content.metadata.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        }
    }

    /// An unsigned integer of any width.
    pub fn optional_u64(&self, key: &str) -> Option<u64> {
        match self.content.metadata.get(key)? {
            Value::U8(v) => Some(u64::from(*v)),
            Value::U16(v) => Some(u64::from(*v)),
            Value::U32(v) => Some(u64::from(*v)),
            Value::U64(v) => Some(*v),
            Value::I8(v) => u64::try_from(*v).ok(),
            Value::I16(v) => u64::try_from(*v).ok(),
            Value::I32(v) => u64::try_from(*v).ok(),
            Value::I64(v) => u64::try_from(*v).ok(),
            _ => None,
        }
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.optional_u64(key)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| self.bad(format!("metadata `{key}` is missing or not an integer")))
    }

    pub fn optional_f32(&self, key: &str) -> Option<f32> {
        match self.content.metadata.get(key)? {
            Value::F32(v) => Some(*v),
            Value::F64(v) => Some(*v as f32),
            _ => None,
        }
    }

    pub fn optional_bool(&self, key: &str) -> Option<bool> {
        match self.content.metadata.get(key)? {
            Value::Bool(v) => Some(*v),
            _ => None,
        }
    }

    /// A string array such as `tokenizer.ggml.tokens`.
    pub fn string_array(&self, key: &str) -> Result<Vec<String>> {
        match self.content.metadata.get(key) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(self.bad(format!("metadata `{key}` holds a non-string"))),
                })
                .collect(),
            _ => Err(self.bad(format!("metadata `{key}` is missing or not an array"))),
        }
    }

    /// An integer array such as `tokenizer.ggml.token_type`.
    pub fn optional_int_array(&self, key: &str) -> Option<Vec<i64>> {
        match self.content.metadata.get(key)? {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::I32(x) => Some(i64::from(*x)),
                    Value::U32(x) => Some(i64::from(*x)),
                    Value::I8(x) => Some(i64::from(*x)),
                    Value::U8(x) => Some(i64::from(*x)),
                    Value::I64(x) => Some(*x),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }

    /// A float array such as `tokenizer.ggml.scores`.
    pub fn optional_f32_array(&self, key: &str) -> Option<Vec<f32>> {
        match self.content.metadata.get(key)? {
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::F32(x) => Some(*x),
                    Value::F64(x) => Some(*x as f32),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    pub fn tensor(&mut self, name: &str, device: &Device) -> Result<QTensor> {
        let path = self.path.clone();
        self.content
            .tensor(&mut self.reader, name, device)
            .map_err(|e| EngineError::BadModelFile {
                path,
                reason: format!("tensor `{name}`: {e}"),
            })
    }

    pub fn bad(&self, reason: String) -> EngineError {
        EngineError::BadModelFile {
            path: self.path.clone(),
            reason,
        }
    }
}

/// Every tensor must have a sane shape and lie wholly inside the file.
fn validate_tensors(content: &Content, file_size: u64) -> std::result::Result<(), String> {
    if content.tensor_infos.is_empty() {
        return Err("the file holds no tensors".into());
    }
    for (name, info) in &content.tensor_infos {
        let dims = info.shape.dims();
        if dims.len() > MAX_TENSOR_DIMS {
            return Err(format!("tensor `{name}` has {} dimensions", dims.len()));
        }
        let elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
            .ok_or_else(|| format!("tensor `{name}` has an absurd shape {dims:?}"))?;
        let block = info.ggml_dtype.block_size() as u64;
        if elements % block != 0 {
            return Err(format!(
                "tensor `{name}`: {elements} elements is not a multiple of block size {block}"
            ));
        }
        let bytes = (elements / block)
            .checked_mul(info.ggml_dtype.type_size() as u64)
            .ok_or_else(|| format!("tensor `{name}` is absurdly large"))?;
        let end = content
            .tensor_data_offset
            .checked_add(info.offset)
            .and_then(|start| start.checked_add(bytes))
            .ok_or_else(|| format!("tensor `{name}` has an absurd offset"))?;
        if end > file_size {
            return Err(format!(
                "tensor `{name}` ends at byte {end} but the file has {file_size} bytes (truncated?)"
            ));
        }
    }
    Ok(())
}
