//! TASK jobs as prompts for hosted models, and model answers as job output.
//!
//! The templates are part of the public behaviour and are copied in
//! `router/README.md`; change both together.

use crate::error::AdapterError;
use protocol::api::TaskType;
use serde_json::Value;

/// A TASK job as a chat: the instructions as the system prompt and the
/// input, verbatim, as the only user message. Keeping the input out of the
/// instructions makes it harder for the input to pass itself off as them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPrompt {
    pub system: &'static str,
    pub user: String,
}

/// The system prompt of each task type.
pub fn task_instructions(task_type: TaskType) -> &'static str {
    match task_type {
        TaskType::Summarize => {
            "Summarize the text the user sends in at most three sentences. \
             Reply with the summary only."
        }
        TaskType::Classify => {
            "Classify the text the user sends. Reply with a single short \
             lowercase label only (for example: positive, negative, neutral, \
             question, spam), with no explanation."
        }
        TaskType::ExtractJson => {
            "Extract the structured information in the text the user sends as \
             one JSON object. Reply with the JSON object only: no prose, no \
             code fences."
        }
    }
}

/// The chat sent to a hosted model for a TASK job.
pub fn task_prompt(task_type: TaskType, input: &str) -> TaskPrompt {
    TaskPrompt {
        system: task_instructions(task_type),
        user: input.to_owned(),
    }
}

/// The job output for a model's answer: the trimmed text for summarize and
/// classify, parsed JSON for extract_json.
pub fn task_output(task_type: TaskType, answer: &str) -> Result<Value, AdapterError> {
    match task_type {
        TaskType::Summarize | TaskType::Classify => Ok(Value::String(answer.trim().to_owned())),
        TaskType::ExtractJson => {
            extract_json(answer).map_err(|message| AdapterError::InvalidJsonOutput { message })
        }
    }
}

/// Parses a model's JSON answer. Models often wrap JSON in a Markdown code
/// fence or a sentence despite the prompt, so this strips a fence and, if
/// the text still does not parse, tries the outermost `{...}` or `[...]`.
pub fn extract_json(answer: &str) -> Result<Value, String> {
    let text = strip_code_fence(answer.trim());
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(first_error) => {
            for (open, close) in [('{', '}'), ('[', ']')] {
                if let (Some(start), Some(end)) = (text.find(open), text.rfind(close)) {
                    if start < end {
                        if let Ok(value) = serde_json::from_str(&text[start..=end]) {
                            return Ok(value);
                        }
                    }
                }
            }
            Err(first_error.to_string())
        }
    }
}

fn strip_code_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    // Drop the info string (`json`) up to the end of the first line.
    let rest = rest.split_once('\n').map_or("", |(_, body)| body);
    rest.trim_end().strip_suffix("```").unwrap_or(rest).trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_with_and_without_fences() {
        assert_eq!(extract_json(r#"{"a":1}"#), Ok(json!({"a": 1})));
        assert_eq!(
            extract_json("```json\n{\"a\": [1, 2]}\n```"),
            Ok(json!({"a": [1, 2]}))
        );
        assert_eq!(extract_json("```\n[1]\n```\n"), Ok(json!([1])));
        assert_eq!(
            extract_json("Here you go: {\"name\": \"Ada\"} Hope it helps."),
            Ok(json!({"name": "Ada"}))
        );
        assert!(extract_json("no json here").is_err());
        assert!(extract_json("```json\n{\"a\": \n```").is_err());
    }

    #[test]
    fn text_tasks_are_trimmed_strings() {
        assert_eq!(
            task_output(TaskType::Classify, "  spam\n"),
            Ok(Value::String("spam".into()))
        );
        assert!(matches!(
            task_output(TaskType::ExtractJson, "nope"),
            Err(AdapterError::InvalidJsonOutput { .. })
        ));
    }

    #[test]
    fn templates_keep_the_input_apart() {
        for t in TaskType::ALL {
            let prompt = task_prompt(*t, "INPUT-42");
            assert_eq!(prompt.user, "INPUT-42");
            assert!(!prompt.system.contains("INPUT-42"));
        }
        assert!(task_instructions(TaskType::ExtractJson).contains("JSON"));
    }
}
