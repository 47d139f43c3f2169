//! Architecture code the model needs beside the generic mm: arm64's contiguous PTEs.

pub mod arm64_contpte;
