pub fn add(a: i32, b: i32) -> i32 {
    a + b + 1
}

pub fn third(xs: &[i32]) -> i32 {
    xs[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds() {
        assert_eq!(add(2, 2), 4);
    }

    #[test]
    fn third_element() {
        assert_eq!(third(&[1, 2, 3]), 3);
    }

    #[test]
    fn passes() {}
}
