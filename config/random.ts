// Moved to config/rules/random.ts. This re-export stays only while the Tinker tests (being changed for #30) import it here.
export * from './rules/random';
