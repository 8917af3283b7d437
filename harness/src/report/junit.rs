//! JUnit XML for CI systems (`harness run --junit FILE`): one test suite per
//! run, one test case per scenario. A failure carries its message and the
//! transcript's tail, a skipped scenario its reason. Written with
//! quick-junit, the serializer cargo-nextest uses.

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use std::path::Path;
use std::time::Duration;

/// How one scenario ended, as JUnit sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseResult {
    Passed,
    Failed { message: String, tail: Vec<String> },
    Skipped(String),
}

/// One scenario's run.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub wall_ms: u128,
    pub result: CaseResult,
}

/// The JUnit XML of `cases`, as one suite named `suite`.
pub fn render(suite: &str, cases: &[Case]) -> Result<String, quick_junit::SerializeError> {
    let mut test_suite = TestSuite::new(suite);
    test_suite.add_test_cases(cases.iter().map(test_case));
    let mut report = Report::new("harness");
    report.add_test_suite(test_suite);
    report.to_string()
}

/// Writes [`render`] to `path`.
pub fn write(path: &Path, suite: &str, cases: &[Case]) -> Result<(), String> {
    let xml = render(suite, cases).map_err(|e| e.to_string())?;
    std::fs::write(path, xml).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn test_case(case: &Case) -> TestCase {
    let status = match &case.result {
        CaseResult::Passed => TestCaseStatus::success(),
        CaseResult::Failed { message, tail } => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status.set_message(message.as_str());
            status.set_description(tail.join("\n"));
            status
        }
        CaseResult::Skipped(reason) => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(reason.as_str());
            status
        }
    };
    let mut test_case = TestCase::new(case.name.as_str(), status);
    test_case.set_classname("scenarios");
    let wall_ms = u64::try_from(case.wall_ms).unwrap_or(u64::MAX);
    test_case.set_time(Duration::from_millis(wall_ms));
    test_case
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_junit_parser_reads_back_every_case_and_its_outcome() {
        let cases = [
            Case {
                name: "claim_lifecycle".into(),
                wall_ms: 12,
                result: CaseResult::Passed,
            },
            Case {
                name: "private <jobs> & \"quotes\"".into(),
                wall_ms: 3,
                result: CaseResult::Failed {
                    message: "step 4: expected 201, got 422".into(),
                    tail: vec!["line \u{1b}[31m with an escape".into(), "last".into()],
                },
            },
            Case {
                name: "crash_and_restart".into(),
                wall_ms: 0,
                result: CaseResult::Skipped("simulation only (live = false)".into()),
            },
        ];
        let xml = render("live", &cases).unwrap();
        let report = Report::deserialize_from_str(&xml).expect("valid JUnit XML");
        assert_eq!((report.tests, report.failures, report.errors), (3, 1, 0));
        let suite = &report.test_suites[0];
        assert_eq!(suite.name.as_str(), "live");
        let names: Vec<&str> = suite.test_cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            cases
                .map(|c| c.name)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
        );
        let failed = &suite.test_cases[1].status;
        assert!(matches!(
            failed,
            TestCaseStatus::NonSuccess {
                kind: NonSuccessKind::Failure,
                ..
            }
        ));
        assert!(matches!(
            suite.test_cases[2].status,
            TestCaseStatus::Skipped { .. }
        ));
    }
}
