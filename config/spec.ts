// Moved to config/io/spec.ts. This re-export stays only while the Tinker tests (being changed for #30) import it here.
export * from './io/spec';
