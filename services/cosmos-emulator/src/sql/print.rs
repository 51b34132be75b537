//! Expressions back to SQL text, for the query plan: its ORDER BY expressions and the
//! rewritten query each partition runs. The text parses back to the same tree.

use std::fmt::Write;

use super::parser::{Aggregate, BinaryOp, Expr, Function, PathStep, UnaryOp};

impl Expr {
    /// This expression as SQL, with paths rooted at `alias`. Every compound expression
    /// is parenthesised, so the text never depends on operator precedence.
    pub fn to_sql(&self, alias: &str) -> String {
        let mut out = String::new();
        write_expr(self, alias, &mut out);
        out
    }
}

fn write_expr(expr: &Expr, alias: &str, out: &mut String) {
    match expr {
        Expr::Literal(value) => out.push_str(&value.to_string()),
        Expr::Undefined => out.push_str("undefined"),
        Expr::Param(name) => out.push_str(name),
        Expr::Root => out.push_str(alias),
        Expr::Path(steps) => {
            out.push_str(alias);
            for step in steps {
                match step {
                    PathStep::Field(name) if is_identifier(name) => {
                        out.push('.');
                        out.push_str(name);
                    }
                    PathStep::Field(name) => {
                        out.push('[');
                        out.push_str(&serde_json::Value::from(name.as_str()).to_string());
                        out.push(']');
                    }
                    PathStep::Index(index) => {
                        out.push('[');
                        write_expr(index, alias, out);
                        out.push(']');
                    }
                }
            }
        }
        Expr::Unary(op, inner) => {
            out.push_str(match op {
                UnaryOp::Not => "(NOT ",
                // The space keeps `- -x` from reading as a `--` comment.
                UnaryOp::Neg => "(- ",
            });
            write_expr(inner, alias, out);
            out.push(')');
        }
        Expr::Binary(op, left, right) => {
            out.push('(');
            write_expr(left, alias, out);
            let _ = write!(out, " {} ", operator(*op));
            write_expr(right, alias, out);
            out.push(')');
        }
        Expr::Chain(first, rest) => {
            out.push('(');
            write_expr(first, alias, out);
            for (op, operand) in rest {
                let _ = write!(out, " {} ", operator(*op));
                write_expr(operand, alias, out);
            }
            out.push(')');
        }
        Expr::In {
            needle,
            list,
            negated,
        } => {
            out.push('(');
            write_expr(needle, alias, out);
            out.push_str(if *negated { " NOT IN (" } else { " IN (" });
            write_list(list.iter(), alias, out);
            out.push_str("))");
        }
        Expr::Between(value, low, high) => {
            out.push('(');
            write_expr(value, alias, out);
            out.push_str(" BETWEEN ");
            write_expr(low, alias, out);
            out.push_str(" AND ");
            write_expr(high, alias, out);
            out.push(')');
        }
        Expr::Call(function, args) => {
            out.push_str(function_name(*function));
            out.push('(');
            write_list(args.iter(), alias, out);
            out.push(')');
        }
        Expr::Aggregate(aggregate, arg) => {
            out.push_str(aggregate_name(*aggregate));
            out.push('(');
            write_expr(arg, alias, out);
            out.push(')');
        }
        Expr::Array(items) => {
            out.push('[');
            write_list(items.iter(), alias, out);
            out.push(']');
        }
        Expr::Object(fields) => write_object(
            fields.iter().map(|(name, value)| (name.as_str(), value)),
            alias,
            out,
        ),
    }
}

fn write_list<'a>(items: impl Iterator<Item = &'a Expr>, alias: &str, out: &mut String) {
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_expr(item, alias, out);
    }
}

/// `{"name": expr, …}`; names are written as JSON strings, which any name can be.
pub fn write_object<'a>(
    fields: impl Iterator<Item = (&'a str, &'a Expr)>,
    alias: &str,
    out: &mut String,
) {
    out.push('{');
    for (i, (name, value)) in fields.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&serde_json::Value::from(name).to_string());
        out.push_str(": ");
        write_expr(value, alias, out);
    }
    out.push('}');
}

/// A name the lexer reads as one identifier (and the parser accepts after a `.`).
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn operator(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Or => "OR",
        BinaryOp::And => "AND",
        BinaryOp::Eq => "=",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Concat => "||",
    }
}

pub fn aggregate_name(aggregate: Aggregate) -> &'static str {
    match aggregate {
        Aggregate::Count => "COUNT",
        Aggregate::Sum => "SUM",
        Aggregate::Min => "MIN",
        Aggregate::Max => "MAX",
        Aggregate::Avg => "AVG",
    }
}

fn function_name(function: Function) -> &'static str {
    match function {
        Function::IsDefined => "IS_DEFINED",
        Function::IsNull => "IS_NULL",
        Function::StartsWith => "STARTSWITH",
        Function::Contains => "CONTAINS",
        Function::ArrayContains => "ARRAY_CONTAINS",
        Function::Lower => "LOWER",
        Function::Upper => "UPPER",
        Function::Length => "LENGTH",
        Function::Abs => "ABS",
    }
}
